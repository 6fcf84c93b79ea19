"""DVC entry point of the 'evaluate_base' stage: `python stages/evaluate_base.py` (= `recipematch evaluate-base`)."""

from recipematch.pipeline.evaluate_base import main

if __name__ == "__main__":
    main()
