"""DVC entry point of the 'verified' stage: `python stages/verified.py [options]` (= `recipematch verified`)."""

from recipematch.pipeline.verified import main

if __name__ == "__main__":
    main()
