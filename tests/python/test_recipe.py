# SPDX-License-Identifier: MIT
"""The modern ImageNet recipe through stoker.Loader: TrivialAugmentWide,
RandomErasing and Mixup/CutMix are the same bytes whatever the threads and
after a resume; Mixup/CutMix batches are the un-mixed batch mixed with
itself rolled by one, with soft targets that say so."""
import math

import pytest
import torch

import stoker

RECIPE = dict(auto_augment="ta_wide", augment_interpolation="bilinear", random_erase=0.1,
              mixup_alpha=0.2, cutmix_alpha=1.0)


def batches(shards, n=None, state=None, **options):
    loader = stoker.Loader(shards, batch_size=8, image_size=40, transform="train",
                           dtype="float32", seed=4, samples_per_rank=96, **options)
    if state is not None:
        loader.load_state_dict(state)
    out, saved = [], None
    for images, target in loader:
        out.append((images.clone(), target))
        if len(out) == n:
            saved = loader.state_dict()
            break
    loader.close()
    return out, saved


def same(a, b):
    def eq(x, y):
        if isinstance(x, tuple):
            return all(eq(p, q) for p, q in zip(x, y))
        return torch.equal(x, y) if isinstance(x, torch.Tensor) else x == y
    return len(a) == len(b) and all(eq(p[0], q[0]) and eq(p[1], q[1]) for p, q in zip(a, b))


def test_recipe_is_independent_of_threads(even_shards):
    one, _ = batches(even_shards, threads=1, num_classes=10000, **RECIPE)
    two, _ = batches(even_shards, threads=2, num_classes=10000, **RECIPE)
    assert len(one) == 12 and same(one, two)
    plain, _ = batches(even_shards, threads=2)
    # the augmentations did something (the test can fail)
    assert not torch.equal(one[0][0], plain[0][0])


def test_recipe_resumes_exactly(even_shards):
    whole, _ = batches(even_shards, threads=2, **RECIPE)
    head, state = batches(even_shards, n=5, threads=2, **RECIPE)
    tail, _ = batches(even_shards, state=state, threads=1, **RECIPE)
    assert same(head + tail, whole)


def test_mixed_batches_are_the_plain_batch_rolled(even_shards):
    aug = dict(RECIPE, mixup_alpha=0, cutmix_alpha=0)
    plain, _ = batches(even_shards, threads=2, **aug)
    for alphas in (dict(mixup_alpha=0.2), dict(cutmix_alpha=1.0)):
        mixed, _ = batches(even_shards, threads=2, **dict(aug, **alphas))
        for (x, labels), (m, (own, partner, w)) in zip(plain, mixed):
            assert torch.equal(own, labels) and torch.equal(partner, labels.roll(1, 0))
            rolled = x.roll(1, 0)
            if "mixup_alpha" in alphas:
                assert torch.allclose(m, w * x + (1 - w) * rolled, atol=1e-5)
            else:
                from_partner = (m == rolled) & (m != x)
                # what is not the image's own comes from the previous image,
                # in one box whose area is 1 - w of the image
                assert torch.all((m == x) | (m == rolled))
                box = from_partner.any(0).any(0)
                area = box.any(0).sum() * box.any(1).sum()
                assert abs(float(1 - area / box.numel()) - w) < 0.2 or not box.any()


def test_soft_targets(even_shards):
    mixed, _ = batches(even_shards, threads=2, num_classes=200, **RECIPE)
    pairs, _ = batches(even_shards, threads=2, **RECIPE)
    for (_, soft), (_, (own, partner, w)) in zip(mixed, pairs):
        assert soft.shape == (8, 200) and torch.allclose(soft.sum(1), torch.ones(8))
        expect = torch.zeros(8, 200)
        expect[torch.arange(8), own] += w
        expect[torch.arange(8), partner] += 1 - w
        assert torch.allclose(soft, expect)


def test_float16_mixing_is_refused(even_shards):
    with pytest.raises(stoker.OptionError, match="float16"):
        stoker.Loader(even_shards, transform="train", dtype="float16", mixup_alpha=0.2)


def test_preset_is_the_reference_recipe(even_shards):
    explicit, _ = batches(even_shards, threads=2, **RECIPE)
    preset, _ = batches(even_shards, threads=2, recipe="torchvision-v2")
    assert same(explicit, preset)
    # an option set explicitly keeps its value
    no_erase, _ = batches(even_shards, threads=2, **dict(RECIPE, random_erase=0.5))
    preset_erase, _ = batches(even_shards, threads=2, recipe="torchvision-v2", random_erase=0.5)
    assert same(no_erase, preset_erase) and not same(no_erase, explicit)


def eval_images(shards, **options):
    loader = stoker.Loader(shards, batch_size=8, image_size=24, transform="eval", shuffle=False,
                           samples_per_rank=16, **options)
    out = torch.cat([images.clone() for images, _ in loader])
    loader.close()
    return out


def test_eval_resize(even_shards):
    default = eval_images(even_shards)
    assert torch.equal(default, eval_images(even_shards, eval_resize=27))  # int(24 / 0.875)
    assert not torch.equal(default, eval_images(even_shards, eval_resize=40))


@pytest.fixture(scope="module")
def even_index(even_shards, stoker_bin, tmp_path_factory):
    import subprocess
    index = tmp_path_factory.mktemp("ra-index") / "index.json"
    subprocess.run([stoker_bin, "index", "-o", str(index), *even_shards], check=True,
                   capture_output=True, timeout=120)
    return str(index)


def ra_epoch(shards, index, reps, world, **options):
    """Every rank of a world in this process: the ranks each sample came to
    (one entry a copy), its pixels per copy, and the batches of each rank."""
    seen, pixels, lengths = {}, {}, []
    for rank in range(world):
        n = 0
        with stoker.Loader(shards, batch_size=5, image_size=16, transform="train", seed=9,
                           rank=rank, world_size=world, ra_reps=reps, index=index, threads=2,
                           fields=("jpg", "__key__"), **options) as loader:
            for images, keys in loader:
                n += 1
                for k, img in zip(keys, images):
                    seen.setdefault(k, []).append(rank)
                    pixels.setdefault(k, []).append(img.clone())
        lengths.append(n)
    return seen, pixels, lengths


@pytest.mark.parametrize("world", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("reps", [1, 2, 3, 4])
def test_repeated_augmentation_takes_any_pair(even_shards, even_index, reps, world):
    """ra_reps over any world size, as torchvision's RASampler deals the
    copies round robin: every sample of the epoch comes ra_reps times, on
    ra_reps different ranks where there are that many (else spread over
    all ranks as evenly as can be), each copy with its own pixels; every
    rank yields the same number of batches. Each rank yields total / world
    samples rounded down to a multiple of the copies' parts it reads
    (docs/images.md), so an epoch covers about 1 / ra_reps of the data."""
    seen, pixels, lengths = ra_epoch(even_shards, even_index, reps, world)
    total = 120
    slots = reps // math.gcd(reps, world)  # the copies' parts a rank reads
    share = total // world // slots * slots
    assert lengths == [math.ceil(share / 5)] * world
    assert all(len(ranks) == reps for ranks in seen.values()), seen
    assert len(seen) * reps == share * world
    for ranks in seen.values():
        per_rank = [ranks.count(r) for r in range(world)]
        if world >= reps:
            assert len(set(ranks)) == reps, ranks
        else:
            assert max(per_rank) - min(per_rank) <= 1, ranks
    assert all(not torch.equal(p[i], p[j]) for p in pixels.values()
               for i in range(len(p)) for j in range(i))


def test_repeated_augmentation_resumes_exactly_whatever_the_threads(even_shards, even_index):
    """ra_reps=3 on 4 ranks (each rank reads three copies' parts): a resumed
    epoch continues the same bytes, on another thread count too."""
    def run(n=None, state=None, threads=2):
        out, saved = [], None
        with stoker.Loader(even_shards, batch_size=4, image_size=16, transform="train", seed=3,
                           rank=1, world_size=4, ra_reps=3, index=even_index, threads=threads,
                           fields=("jpg", "__key__")) as loader:
            if state is not None:
                loader.load_state_dict(state)
            for images, keys in loader:
                out.append((images.clone(), list(keys)))
                if len(out) == n:
                    saved = loader.state_dict()
                    break
        return out, saved
    whole, _ = run()
    head, state = run(n=3)
    tail, _ = run(state=state, threads=1)
    assert len(whole) == 8 and len(head) == 3
    assert all(torch.equal(a[0], b[0]) and a[1] == b[1] for a, b in zip(head + tail, whole))
    assert len(head + tail) == len(whole)


def test_repeated_augmentation_refuses_what_it_cannot_deal(even_shards, even_index):
    """Where ra_reps does not divide world_size a rank reads the parts of
    several copies: node affinity (a sample's ranks on one node) and a
    samples_per_rank below one sample of each part are refused, saying
    why."""
    with pytest.raises(stoker.OptionError, match=r"node_affinity with ra_reps=3 and "
                       r"world_size=4: .* node affinity needs ra_reps to divide the ranks per "
                       r"node"):
        stoker.Loader(even_shards, transform="train", rank=0, world_size=4, ra_reps=3,
                      index=even_index, node_affinity=1, ranks_per_node=2)
    with pytest.raises(stoker.OptionError, match=r"samples_per_rank=2 with ra_reps=3 and "
                       r"world_size=4: each rank reads 3 parts of the epoch"):
        stoker.Loader(even_shards, transform="train", rank=0, world_size=4, ra_reps=3,
                      index=even_index, samples_per_rank=2)


def erased_images(shards, threads=2, **options):
    loader = stoker.Loader(shards, batch_size=8, image_size=40, transform="train", seed=4,
                           samples_per_rank=48, random_erase=1.0, threads=threads, **options)
    out = torch.cat([images.clone() for images, _ in loader])
    loader.close()
    return out


def test_random_erasing_value(even_shards):
    """random_erase_value="random": the box of value 0 (same draws: the numbers come after
    it) holds standard normal numbers in float outputs; bfloat16 holds the same numbers
    rounded; uint8 the levels they stand for, round(255 * (mean + std * z)) clamped."""
    zero = erased_images(even_shards, dtype="float32")
    rand = erased_images(even_shards, dtype="float32", random_erase_value="random")
    box = (zero == 0).all(1, keepdim=True).expand_as(zero)
    assert 0.02 < box.float().mean() < 0.34  # RandomErasing's scale (0.02, 0.33)
    assert torch.equal(rand[~box], zero[~box])
    z = rand[box].double()
    assert abs(z.mean()) < 0.03 and abs(z.std() - 1) < 0.03, (z.mean(), z.std())
    assert abs(float((z.abs() > 1.96).double().mean()) - 0.05) < 0.01
    # the numbers differ per element, channel and sample, and not with the threads
    assert len(torch.unique(rand[box])) > 0.99 * box.sum()
    assert torch.equal(rand, erased_images(even_shards, threads=1, dtype="float32",
                                           random_erase_value="random"))

    bf16 = erased_images(even_shards, dtype="bfloat16", random_erase_value="random")
    assert torch.equal(bf16, rand.to(torch.bfloat16))

    u8 = erased_images(even_shards, dtype="uint8", random_erase_value="random")
    u8_zero = erased_images(even_shards, dtype="uint8")
    assert torch.equal(u8[~box], u8_zero[~box])
    mean = torch.tensor([0.485, 0.456, 0.406], dtype=torch.float64).view(1, 3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225], dtype=torch.float64).view(1, 3, 1, 1)
    levels = (255 * (mean + std * rand.double())).round().clamp(0, 255)
    off = (u8.double() - levels).abs()[box]
    # z went through float32 here: a level can round the other way
    assert off.max() <= 1 and (off == 0).double().mean() > 0.99
    assert not torch.equal(u8[box], u8_zero[box])


TA_OPS = ["shear_x", "shear_y", "translate_x", "translate_y", "rotate", "brightness", "color",
          "contrast", "sharpness", "posterize", "solarize", "autocontrast", "equalize"]
OTHER_OPS = ["invert", "hue", "grayscale", "blur"]


def run_stats(shards, **options):
    loader = stoker.Loader(shards, batch_size=8, image_size=40, transform="train", seed=4,
                           samples_per_rank=96, threads=2, **options)
    for _ in loader:
        pass
    stats, report = loader.stats(), loader.report()
    loader.close()
    return stats, report


def test_per_op_times(even_shards):
    """TrivialAugmentWide: every op it drew has runs and time, the ops it cannot draw have
    neither; the runs add up to the images less the identity draws; the report prints a
    line per op that ran. Then ColorJitter's hue and a blur count on every image."""
    stats, report = run_stats(even_shards, auto_augment="ta_wide")
    images = stats["images_decoded"]
    runs = {op: stats[f"aug_{op}_runs"] for op in TA_OPS + OTHER_OPS}
    for op in TA_OPS + OTHER_OPS:
        assert (runs[op] > 0) == (stats[f"aug_{op}_ns"] > 0), op
    assert all(runs[op] == 0 for op in OTHER_OPS), runs
    # 13 ops of 14 (identity the other): each drawn about images / 14 times
    assert sum(runs[op] > 0 for op in TA_OPS) >= 11, runs
    assert 0.8 * images * 13 / 14 < sum(runs.values()) <= images
    assert sum(stats[f"aug_{op}_ns"] for op in TA_OPS) <= stats["image_augment_ns"]
    for op, label in (("rotate", "Rotate"), ("equalize", "Equalize")):
        if runs[op]:
            assert f"  {label}: " in report and "ms per run" in report, report
    assert "Hue:" not in report and "GaussianBlur:" not in report

    stats, report = run_stats(even_shards, hue_jitter=0.2, blur_kernel=3)
    assert stats["aug_hue_runs"] == stats["aug_blur_runs"] == stats["images_decoded"]
    assert stats["aug_hue_ns"] > 0 and stats["aug_blur_ns"] > 0
    assert all(stats[f"aug_{op}_runs"] == 0 for op in TA_OPS if op != "brightness")
    assert "  Hue: " in report and "  GaussianBlur: " in report

    plain, report = run_stats(even_shards)
    assert all(plain[f"aug_{op}_runs"] == plain[f"aug_{op}_ns"] == 0 for op in TA_OPS + OTHER_OPS)
    assert "per run" not in report


EVERY_OP = dict(color_jitter=0.4, hue_jitter=0.1, grayscale_probability=0.2, blur_kernel=5,
                random_erase=0.5, random_erase_value="random", interpolation="bicubic",
                mixup_alpha=0.2, cutmix_alpha=1.0)


@pytest.mark.parametrize("policy", ["ra", "imagenet"])
def test_every_op_is_independent_of_threads_and_resumes(even_shards, policy):
    """RandAugment and AutoAugment with every other option of the recipe (ColorJitter,
    grayscale, blur, random erasing with random values, bicubic resize, Mixup/CutMix): the
    same bytes with 1 and 2 threads, and after a resume on another thread count."""
    options = dict(EVERY_OP, auto_augment=policy)
    one, _ = batches(even_shards, threads=1, **options)
    two, _ = batches(even_shards, threads=2, **options)
    assert len(one) == 12 and same(one, two)
    head, state = batches(even_shards, n=5, threads=2, **options)
    tail, _ = batches(even_shards, state=state, threads=1, **options)
    assert same(head + tail, one)
    bilinear, _ = batches(even_shards, threads=2, **dict(options, interpolation="bilinear"))
    assert not same(one, bilinear)  # the options change the bytes (the test can fail)


@pytest.mark.parametrize("mixing", [dict(mixup_alpha=0.2), dict(cutmix_alpha=1.0),
                                    dict(mixup_alpha=0.2, cutmix_alpha=1.0, num_classes=10000)])
def test_fields_carry_the_mixed_targets(even_shards, mixing):
    """Loader(fields=(..., "__label__"), mixup_alpha=...) mixed the images
    but carried each sample's own label: the partner labels and weights were
    dropped and num_classes ignored. The fields' labels are now the targets
    the (images, labels) batch has, for the same seed."""
    plain, _ = batches(even_shards, **mixing)
    loader = stoker.Loader(even_shards, batch_size=8, image_size=40, transform="train",
                           dtype="float32", seed=4, samples_per_rank=96,
                           fields=("jpg", "__label__", "__key__"), **mixing)
    fielded = [(images.clone(), target) for images, target, _ in loader]
    loader.close()
    assert all(isinstance(t, tuple if "num_classes" not in mixing else torch.Tensor)
               for _, t in plain)
    assert same(plain, fielded)


def test_fields_without_a_label_refuse_mixing(even_shards):
    """Mixed images without their mixed targets cannot be trained on: say so."""
    for mixing in (dict(mixup_alpha=0.2), dict(cutmix_alpha=1.0), dict(recipe="torchvision-v2")):
        with pytest.raises(stoker.OptionError, match="has no '__label__', but Mixup/CutMix"):
            stoker.Loader(even_shards, transform="train", fields=("jpg", "__key__"), **mixing)


def test_magnitude_bins_below_10_work_where_no_magnitude_is_fixed(even_shards):
    """TrivialAugmentWide draws its bin: augment_magnitude_bins <= 9 was
    refused with a message about ra_magnitude, which only RandAugment uses
    (the user had not set it). RandAugment's default magnitude, 9, still
    needs more bins, and the message says it is the default."""
    for bins in (2, 5, 9):
        images = first_train_batch(even_shards, auto_augment="ta_wide", augment_magnitude_bins=bins)
        assert images.shape == (4, 3, 16, 16)
    images = first_train_batch(even_shards, auto_augment="ra", augment_magnitude_bins=5,
                             ra_magnitude=4)
    assert images.shape == (4, 3, 16, 16)
    with pytest.raises(stoker.OptionError, match=r"ra_magnitude \(9, the default\) must be below "
                                                 r"augment_magnitude_bins \(5\)"):
        first_train_batch(even_shards, auto_augment="ra", augment_magnitude_bins=5)


def first_train_batch(shards, **options):
    """The first batch of a train loader with these augmentations."""
    with stoker.Loader(shards, batch_size=4, image_size=16, transform="train", threads=1,
                       **options) as loader:
        images, _ = next(iter(loader))
        return images.clone()
