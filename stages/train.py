"""DVC entry point of the 'train' stage: `python stages/train.py [options]` (= `recipematch train`)."""

from recipematch.pipeline.train import main

if __name__ == "__main__":
    main()
