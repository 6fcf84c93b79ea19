"""DVC entry point of the 'evaluate' stage: `python stages/evaluate.py [options]` (= `recipematch evaluate-arm`)."""

from recipematch.pipeline.evaluate import main

if __name__ == "__main__":
    main()
