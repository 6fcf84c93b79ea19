"""DVC entry point of the 'corpus' stage: `python stages/corpus.py [options]` (= `recipematch corpus`)."""

from recipematch.pipeline.corpus import main

if __name__ == "__main__":
    main()
