"""DVC entry point of the 'mix' stage: `python stages/mix.py --arm ARM --fraction F [options]`."""

from recipematch.pipeline.mix import main

if __name__ == "__main__":
    main()
