"""Repository tooling (not part of the library wheel)."""
