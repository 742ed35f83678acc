"""Exporters from torch (and a causal LM's weights) to deployable formats, and what a
device wants of them. Imports `runtimes` at most.

    onnx.py          torch -> ONNX, one self-contained file, checked against torch
    static_shapes.py Every dynamic dimension of an ONNX model fixed to the pipeline's shapes
    openvino.py      ONNX -> OpenVINO IR (model.xml + model.bin)
    tflite.py        torch -> TFLite with litert-torch, then ai-edge-quantizer's quantization
    genai.py         A causal LM with its KV cache as ONNX, by onnxruntime-genai's model builder
    genai_compat.py  That builder run with the RoPE settings in the form it reads
    gguf.py          A causal LM as a float GGUF file for llama.cpp
    presets.py       Export presets (presets/*.yaml): what a kind of hardware wants
    op_tables.py     Op-support tables as data: which ops an accelerator takes
    op_support.py    Which ops of a model an accelerator takes, before anything runs
    quiet.py         What native libraries print to file descriptors 1 and 2, kept back
"""
