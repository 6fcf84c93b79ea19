"""DVC entry point of the 'recordings' stage: `python stages/recordings.py [options]` (= `recipematch recordings`)."""

from recipematch.pipeline.recordings import main

if __name__ == "__main__":
    main()
