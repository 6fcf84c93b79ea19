"""DVC entry point of the 'style' stage: `python stages/style.py` (= `recipematch style`)."""

from recipematch.pipeline.style import main

if __name__ == "__main__":
    main()
