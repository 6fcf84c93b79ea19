"""DVC entry point of the 'evalsets' stage: `python stages/evalsets.py [options]` (= `recipematch evalsets`)."""

from recipematch.pipeline.evalsets import main

if __name__ == "__main__":
    main()
