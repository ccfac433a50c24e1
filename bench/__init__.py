"""GPU benchmarks writing JSON: run each as ``python -m bench.<script>`` from the repository root (bench/README.md)."""
