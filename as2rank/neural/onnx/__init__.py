"""The int8 corner: calibration of activation ranges at fit, export to ONNX, the statically quantized copy on ONNX Runtime and torch's dynamic one."""
