"""DVC entry point of the 'hits' stage: `python stages/hits.py [options]` (= `recipematch hits`)."""

from recipematch.pipeline.hits import main

if __name__ == "__main__":
    main()
