__version__ = "0.1.0"

# The Rust reference release (RyanLisse/templiqx workspace version) whose compilation and
# mock semantics this package reproduces byte for byte. It names behaviour, not this
# distribution: the compiler id and the scripted runtime's version carry it, so receipts
# fingerprint exactly as the reference's; ``__version__`` above stays the package's own.
REFERENCE_VERSION = "0.2.0"
