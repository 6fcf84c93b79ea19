"""``python -m recipematch`` runs the command line."""

from recipematch.cli import main

if __name__ == "__main__":
    main()
