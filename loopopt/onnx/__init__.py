"""ONNX models on loopopt kernels: ``loopopt.onnx.backend`` (the standard backend API),
``lowering`` (one function per ONNX compute op type), ``report`` (a per-node report of a model).
Needs the ``onnx`` extra (``pip install 'loopopt[onnx]'``)."""
