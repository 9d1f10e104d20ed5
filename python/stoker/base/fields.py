# SPDX-License-Identifier: MIT
"""Loader(fields=...): which members a batch carries and how each parses."""
import json

import torch

from .._ext._stoker import OptionError, OptionTypeError, member_kind

# How a member named in fields= parses: the C library's rule (member_kind(),
# by the last "."-separated part of its extension, as WebDataset's default
# decoders), which the C loader checks too (stk_options.require_members)
# before the sample reaches a batch. Here as the column kinds of _batch.c.
_META_FIELDS = {"__key__": "k", "__url__": "u"}
_COLUMN_KINDS = {"int": "i", "text": "s", "json": "j", "bytes": "b", "image": "b"}


def _is_image(ext):
    """The image a Loader decodes: jpg, jpeg or png, whole."""
    return "." not in ext and member_kind(ext) == "image"


def mix_of(batch):
    """(partner labels, weight) of a C batch Mixup/CutMix mixed, else None."""
    return None if batch.mix_labels is None else (batch.mix_labels, batch.mix_weight)


def targets(labels, mix, num_classes):
    """The labels (a buffer of int64) as the loop gets them, copied (a few
    hundred bytes, so that holding them holds no image buffer). mix: the
    partner labels and weight (mix_of()) of a batch Mixup or CutMix mixed,
    whose targets then say so: soft one-hot rows of num_classes (as the
    classification reference's collate), else (labels, partner labels,
    weight of the labels)."""
    labels = torch.frombuffer(labels, dtype=torch.int64).clone()
    if mix is None:
        return labels
    partners, weight = mix
    partners = torch.frombuffer(partners, dtype=torch.int64).clone()
    if not num_classes:
        return labels, partners, weight
    soft = torch.zeros(len(labels), num_classes, dtype=torch.float32)
    soft.scatter_(1, labels.view(-1, 1), weight)
    soft.scatter_add_(1, partners.view(-1, 1), torch.full((len(labels), 1), 1.0 - weight))
    return soft


class _Fields:
    """What Loader(fields=...) yields, worked out once: per position of the
    tuple, the images, the labels (the mixed targets of a batch Mixup or
    CutMix mixed, as without fields=) or a column of Batch.columns()."""

    def __init__(self, fields, num_classes=0):
        self.num_classes = num_classes
        if isinstance(fields, (str, bytes)) or not hasattr(fields, "__iter__"):
            raise OptionTypeError(f"fields must be a sequence of names such as ('jpg', 'txt', "
                            f"'__key__'), not {type(fields).__name__} {fields!r}")
        names = list(fields)
        if not names:
            raise OptionError("fields must name at least the image, e.g. fields=('jpg', 'txt')")
        self.plan, self.columns, required, seen = [], [], [], set()
        for name in names:
            if not isinstance(name, str):
                raise OptionTypeError(f"fields: {name!r} is not a str (a member extension such as "
                                "'txt', or '__key__', '__url__', '__label__')")
            optional = name.endswith("?")
            ext = (name[:-1] if optional else name).lower()  # stoker lower-cases extensions
            if not ext:
                raise OptionError(f"fields: {name!r} is an empty name")
            # "jpg;png": the first of these members the sample has, as in WebDataset.
            alts = ext.split(";")
            if "" in alts:
                raise OptionError(f"fields: {name!r} has an empty alternative (write e.g. "
                                  "'jpg;png': either member)")
            for alt in alts:
                if alt in seen:
                    raise OptionError(f"fields names {alt!r} twice")
                seen.add(alt)
            images = [a for a in alts if _is_image(a)]
            if images and len(images) != len(alts):
                raise OptionError(f"fields: {name!r} mixes the image ({', '.join(images)}) with "
                                  "other members: alternatives of the image must all be images "
                                  "(jpg, jpeg or png)")
            if images and ("image",) not in self.plan:
                if optional:
                    raise OptionError(f"fields: the image {ext!r} cannot be optional ('?'): "
                                     "every sample must have one")
                self.plan.append(("image",))
            elif ext.startswith("__") and ext.endswith("__"):
                if ext not in ("__key__", "__url__", "__label__"):
                    raise OptionError(f"fields: unknown {ext!r}; the names between double "
                                     "underscores are __key__, __url__ and __label__")
                if optional:
                    raise OptionError(f"fields: {ext} cannot be optional ('?'): every sample "
                                     "has one")
                if ext == "__label__":
                    self.plan.append(("label",))
                else:
                    self.plan.append(("column", len(self.columns)))
                    self.columns.append((ext, _META_FIELDS[ext]))
            else:
                kind = "".join(_COLUMN_KINDS[member_kind(a)] for a in alts)
                # A required int field has no holes: a tensor; optional ones a list.
                ints = set(kind) == {"i"} and not optional
                self.plan.append(("ints" if ints else "column", len(self.columns)))
                self.columns.append((ext, kind))
                required.append(ext + "?" * optional)
        if ("image",) not in self.plan:
            raise OptionError(f"fields {tuple(names)!r} must name the image (jpg, jpeg or png): "
                             "a Loader always decodes it; for members alone use stoker.Samples")
        self.names = tuple(names)
        self.image_name = names[self.plan.index(("image",))]
        self.columns = tuple(self.columns)
        self.require_members = ",".join(required)
        self.wants_label = ("label",) in self.plan

    def batch(self, batch, images, labels=None):
        """The tuple of one batch: images (the zero-copy tensor), the rest
        copied; labels: the labels when the C batch has none
        (transform=None)."""
        columns = batch.columns(self.columns, json.loads) if self.columns else ()
        out = []
        for what, *index in self.plan:
            if what == "image":
                out.append(images)
            elif what == "label":
                out.append(labels if labels is not None else
                           targets(batch.labels, mix_of(batch), self.num_classes))
            elif what == "ints":
                out.append(torch.tensor(columns[index[0]], dtype=torch.int64))
            else:
                out.append(columns[index[0]])
        return tuple(out)
