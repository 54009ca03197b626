"""The shared base every other package may import: user-input errors, config parsing, strict
JSON I/O and run fingerprints. It imports nothing from the project and nothing heavy (no JAX,
no pandas), so command-line entry points can use it before deciding to start any real work."""
