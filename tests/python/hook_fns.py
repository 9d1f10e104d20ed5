# SPDX-License-Identifier: MIT
"""Hooks for test_hooks.py: module-level, so hook processes import them by
name (as plain pickle would); their behaviour depends on the sample's key
where a test needs one sample to misbehave."""
import collections
import os
import random
import sys
import time

import numpy
import torch
import torchvision.transforms as T

AUGMENT = T.Compose([
    T.ColorJitter(0.4, 0.4, 0.4, 0.1),
    T.GaussianBlur(5, sigma=(0.1, 2.0)),
    T.RandomRotation(15),
    T.RandomErasing(p=0.5, value=0),
])


def augment(image, rng):
    """torchvision's classic transforms: they draw from the global torch generator."""
    return AUGMENT(image)


def mixup(batch, rng):
    images, labels = batch
    lam = float(rng.numpy.beta(0.4, 0.4))
    perm = torch.randperm(len(labels), generator=rng.torch)
    mixed = lam * images.float() + (1 - lam) * images.float()[perm]
    onehot = torch.nn.functional.one_hot(labels.clamp(min=0), 1000).float()
    return mixed, lam * onehot + (1 - lam) * onehot[perm]


def draws(image, rng):
    """Every generator a hook may use, side by side."""
    return torch.tensor([
        float(torch.rand(1, generator=rng.torch)), float(rng.numpy.random()),
        float(torch.rand(1)), float(numpy.random.rand()), random.random(),
        float(image.float().mean())], dtype=torch.float64)


def identity(image, rng):
    """The sample as stoker made it: what the batch holds is stoker's own work."""
    return image


def slow_identity(image, rng):
    time.sleep(0.02)
    return image + 1


def tenth_of_a_second(image, rng):
    time.sleep(0.1)
    return image


def picked(image):
    """The images a misbehaving hook picks (a hook sees pixels, not keys)."""
    return int(image.sum()) % 7 == 3


def fail_on_picked(image, rng):
    if picked(image):
        raise ValueError(f"pixel sum {int(image.sum())} is 3 mod 7")
    return image


def wrong_shape_on_picked(image, rng):
    if picked(image):
        return image[:, :-1]
    return image


def hang_on_picked(image, rng):
    if picked(image):
        time.sleep(3600)
    return image


def die_on_picked(image, rng):
    if picked(image):
        os._exit(9)
    return image


def tokenize(sample, rng):
    """A caption tokenizer over fields=("jpg", "txt"): bytes of the words,
    padded to 16, plus the image flipped at random."""
    ids = [sum(w.encode()) % 1000 for w in sample["txt"].split()][:16]
    flip = bool(torch.rand(1) < 0.5)
    image = sample["jpg"].flip(-1) if flip else sample["jpg"]
    return {"image": image, "tokens": torch.tensor(ids + [0] * (16 - len(ids))),
            "caption": sample["txt"]}


def rng_key(sample, rng):
    """The sample's key (as a signed int64: keys take 64 bits) and its name."""
    signed = rng.key - (1 << 64) if rng.key >= 1 << 63 else rng.key
    return {"key": torch.tensor(signed, dtype=torch.int64), "name": sample["__key__"],
            "url": sample["__url__"]}


CROP = T.RandomResizedCrop(48, antialias=True)


def crop_whole(image, rng):
    """transform=None: the hook's own crop of the whole image, from the global generator."""
    return CROP(image)


def caption_only(sample, rng):
    """transform=None with fields=("jpg", "txt"): the caption the hook got
    and the image's channels (whole images differ in size)."""
    return {"caption": sample["txt"], "channels": torch.tensor(sample["jpg"].shape[0])}


def whole_image(sample, rng):
    """transform=None with fields=: what the hook got, to compare with the member."""
    image = sample["jpg"]
    return {"shape": torch.tensor(image.shape), "sum": image.sum(), "dtype": str(image.dtype),
            "name": sample["__key__"]}


def as_is(image, rng):
    return image


def hang(image, rng):
    time.sleep(3600)
    return image


class SlowToLoad:
    """An instant hook whose unpickling takes `seconds` in any process but
    the one that made it: a hook process that starts slowly, as one does
    while its fork server imports torch on a loaded machine."""

    def __init__(self, seconds):
        self.seconds, self.made_in = seconds, os.getpid()

    def __setstate__(self, state):
        self.__dict__.update(state)
        if os.getpid() != self.made_in:
            time.sleep(self.seconds)

    def __call__(self, image, rng):
        return image


class DiesOnLoad(SlowToLoad):
    """A hook whose unpickling kills the hook process (a module whose
    import crashes there)."""

    def __setstate__(self, state):
        self.__dict__.update(state)
        if os.getpid() != self.made_in:
            os._exit(9)


class HangOnce:
    """Hangs in the first call of all (whichever process makes it: a file
    in `directory` says it was made), then returns the image as it is."""

    def __init__(self, directory):
        self.marker = os.path.join(directory, "hung-once")

    def __call__(self, image, rng):
        try:
            os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            return image
        time.sleep(3600)


def exit_on_picked(image, rng):
    if picked(image):
        sys.exit(3)
    return image


def interrupt_on_picked(image, rng):
    if picked(image):
        raise KeyboardInterrupt
    return image


def forgets_return(sample, rng):
    """The slip of a hook that makes its result and does not return it."""
    sample * 2


Stats = collections.namedtuple("Stats", "image total")


def as_stats(image, rng):
    return Stats(image, image.sum())
