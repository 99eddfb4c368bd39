"""``python -m tstreams_embedded.demo``: the main demo (what ``make demo`` runs)."""

from .cli import demo

if __name__ == "__main__":
    demo(prog_name="python -m tstreams_embedded.demo")
