"""DVC entry point of the 'external' stage: `python stages/external.py --name NAME` (= `recipematch external`)."""

from recipematch.pipeline.external import main

if __name__ == "__main__":
    main()
