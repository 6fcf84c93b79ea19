"""DVC entry point of the 'evaluate_bm25' stage: `python stages/evaluate_bm25.py` (= `recipematch evaluate-bm25`)."""

from recipematch.pipeline.evaluate_bm25 import main

if __name__ == "__main__":
    main()
