"""DVC entry point for the 'train' stage: `python stages/train.py [options]` = `recipematch train`."""

import sys

from recipematch.cli import main

if __name__ == "__main__":
    main(["train", *sys.argv[1:]])
