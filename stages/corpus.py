"""DVC entry point for the 'corpus' stage: `python stages/corpus.py [options]` = `recipematch corpus`."""

import sys

from recipematch.cli import main

if __name__ == "__main__":
    main(["corpus", *sys.argv[1:]])
