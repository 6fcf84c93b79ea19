"""DVC entry point of the 'pooling' stage: `python stages/pooling.py --name <pool>` (= `recipematch pooling`)."""

from recipematch.pipeline.pooling import main

if __name__ == "__main__":
    main()
