"""The decoder's building blocks, one file each; modeling.py composes them."""
