"""DVC entry point of the 'soup' stage: `python stages/soup.py --arm ARM --alpha ALPHA [options]`."""

from recipematch.pipeline.soup import main

if __name__ == "__main__":
    main()
