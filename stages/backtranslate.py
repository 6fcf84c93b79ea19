"""DVC entry point of the 'backtranslate' stage: `python stages/backtranslate.py [options]` (= `recipematch backtranslate`)."""

from recipematch.pipeline.backtranslate import main

if __name__ == "__main__":
    main()
