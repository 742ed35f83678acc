"""Weight-only quantization of language models: onnxruntime-genai folders (MatMul weights
in blocks of 4 or 8 bits, the width of each layer chosen from measured cost) and GGUF
files for llama.cpp (its own types).

    nbits.py        the float folder's MatMuls at the width a plan gives each (probes)
    units.py        the units widths are chosen for: a transformer layer, or one MatMul
    sensitivity.py  each unit alone at the low width, scored against the float model
    mix.py          the smallest mix that meets a quality budget: built, judged, chosen
    genai_route.py  onnxruntime-genai's builder makes each file, onnxruntime-genai runs it
    gguf_route.py   llama.cpp's quantizer makes each GGUF type, llama.cpp runs it
    stage.py        the quantize stage's lm-weight-only scheme: one width, or the measured mix
    measured.py     the measured mix as a stage runs it, for any route: what is recorded
    gguf_stage.py   the quantize stage's gguf scheme: llama.cpp's type, or a measured mix of two
    gptq.py         GPTQ (neural-compressor's) on the torch model, its integers in the builder's INT4 file
"""
