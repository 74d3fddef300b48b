"""Per-node report of an ONNX model (filled in below)."""
