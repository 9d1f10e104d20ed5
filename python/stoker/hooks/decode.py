# SPDX-License-Identifier: MIT
"""Loader(transform=None, map=fn): the hook gets the whole decoded image.

The C loader then reads samples without decoding them (its batch ring
holds images of one size, and these have any size). The image member's
compressed bytes go to the hook process through the shared-memory arena
(a tenth of the pixels' size, or less) and are decoded there, just before
the hook runs, so decoding is spread over the hook processes with the
hook itself. The decoder is libjpeg-turbo / libpng through
torchvision.io.decode_image where torchvision is installed, else Pillow
(both give the same pixels for baseline JPEGs with their defaults).

Neither has a pixel limit: a PNG of a hundred kilobytes can say it is
12000 x 12000 and take 432 MB once decoded. The image's size is read from
its header first (Pillow's image classes read the header only) and an
image above max_image_pixels is refused there, as stoker's own decoder
refuses it (src/image/decode_png.c, decode_jpeg.c), with the same message.
"""
import io

import numpy
import torch


def _header_size(data):
    """(width, height, format name) from the image's header, nothing decoded."""
    from PIL import Image, JpegImagePlugin, PngImagePlugin
    fp = io.BytesIO(memoryview(data))
    head = bytes(data[:8])
    # The classes themselves, not Image.open: that one also applies
    # Pillow's own limit, which would refuse (or warn) before saying the
    # size, whatever max_image_pixels says.
    if head.startswith(b"\x89PNG"):
        return (*PngImagePlugin.PngImageFile(fp).size, "PNG")
    if head.startswith(b"\xff\xd8"):
        return (*JpegImagePlugin.JpegImageFile(fp).size, "JPEG")
    with Image.open(fp) as image:  # what only Pillow decodes: its own limit applies too
        return (*image.size, image.format)


def _decode_pillow(data):
    from PIL import Image
    with Image.open(io.BytesIO(memoryview(data))) as image:
        pixels = numpy.array(image.convert("RGB"))
    return torch.from_numpy(pixels).permute(2, 0, 1)


def _decoder():
    try:
        from torchvision.io import ImageReadMode, decode_image
    except ImportError:
        return _decode_pillow

    def decode(data):
        # A tensor over the arena's bytes, which are writable (no copy);
        # bytes from elsewhere that are not are copied, as torch warns of them.
        data = numpy.asarray(data)
        return decode_image(torch.from_numpy(data if data.flags.writeable else data.copy()),
                            ImageReadMode.RGB)
    return decode


class DecodeFirst:
    """What runs in the hook process for transform=None: decode the image
    (the sample itself, or its field `field` when fields= is given) to a
    uint8 tensor, CHW (layout "nchw") or HWC ("nhwc"), then call the
    user's fn(sample, rng). Module-level, so plain pickle sends it."""

    def __init__(self, fn, field, channels_last, max_pixels):
        self.fn, self.field, self.channels_last = fn, field, channels_last
        self.max_pixels = max_pixels  # the loader's max_image_pixels
        self._decode = None

    def __getstate__(self):
        return (self.fn, self.field, self.channels_last, self.max_pixels)

    def __setstate__(self, state):
        self.fn, self.field, self.channels_last, self.max_pixels = state
        self._decode = None

    def image(self, data):
        if self._decode is None:
            self._decode = _decoder()
        try:
            width, height, kind = _header_size(data)
            over = width * height > self.max_pixels
            pixels = None if over else self._decode(data)
        except Exception as e:  # the hook error names the sample; say it is the image
            raise ValueError(f"the image does not decode ({len(data)} bytes): "
                             f"{type(e).__name__}: {e}") from e
        if over:
            raise ValueError(f"{kind} of {width}x{height} pixels is above the limit of "
                             f"{self.max_pixels} pixels (max_image_pixels; not decoded)")
        return pixels.permute(1, 2, 0).contiguous() if self.channels_last else pixels

    def __call__(self, sample, rng):
        if self.field is None:
            sample = self.image(sample)
        else:
            sample = dict(sample)
            sample[self.field] = self.image(sample[self.field])
        return self.fn(sample, rng)
