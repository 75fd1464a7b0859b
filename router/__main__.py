"""Run the router: ``python -m router``."""

from router.main import main

if __name__ == "__main__":
    main()
