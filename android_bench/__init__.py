"""Latency of `.tflite` models: measured on this host, measured on a phone over adb, estimated for Pixel-class
phones from the graph and published hardware figures. `python -m android_bench.report --help` runs all three."""
