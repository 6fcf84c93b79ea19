"""DVC entry point of the 'stats' stage: `python stages/stats.py [options]` (= `recipematch stats`)."""

from recipematch.pipeline.stats import main

if __name__ == "__main__":
    main()
