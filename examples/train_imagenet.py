#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Train a torchvision ResNet on WebDataset shards fed by stoker.

    torchrun --nproc_per_node 8 examples/train_imagenet.py \
        --data '/data/imagenet/train-{000000..001023}.tar' --samples 1281167 --epochs 90

Without torchrun (Debian's torch 1.13 torchrun fails in its elastic agent),
start one process per rank with MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE
and LOCAL_RANK set. --parallel fsdp needs a torch whose FSDP imports on your
Python (Debian's torch 1.13 does not on Python 3.11).

Also runs on a CPU with a tiny model and the sample dataset:

    python3 examples/train_imagenet.py --data 'build-data/sample-data/train-{000000..000007}.tar' \
        --samples 2000 --model resnet18 --image-size 64 --batch-size 32 --epochs 1 --cpu

The loader hands over uint8 NCHW batches; normalization, the float
conversion and channels_last happen on the GPU, where they are nearly free.
All ranks run the same number of steps, so DDP/FSDP never waits on a rank
that ran out of data, with no option: the loader sees torch.distributed
initialised and its ranks agree on every step (the first rank out of
batches ends the epoch for all). --samples (samples_per_rank = samples //
world_size) or --index (a dataset index, built at that path on first use)
fix the steps in advance; len(loader) needs neither (the loader counts the
shards once and remembers the index for every later process). The number
of classes is len(loader.classes), the classes.txt that `stoker pack
--classes` writes beside the shards, as the reference reads dataset.classes.
--val-data evaluates after each epoch with every validation sample exactly
once across the ranks (uneven=True) and one all_reduce of the counts. A checkpoint holding the model, optimizer and the
loader's state is written every --checkpoint-every steps and at each
epoch's end; --resume continues mid-epoch with exactly the batches an
uninterrupted run would have seen, through the usual epoch loop:
load_state_dict() once, then set_epoch() keeps the saved batch (with
--index the loader re-reads at most one shuffle window to get there).

With --cluster tcp://SCHEDULER:8786 (and --index) Dask workers on CPU-only
hosts decode batch ranges too, beside the rank's own threads; training sees
the same batches as without them (examples/cluster/ starts such workers
under Slurm or Kubernetes).
"""
import argparse
import contextlib
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
import torchvision

import stoker

MEAN = torch.tensor([0.485, 0.456, 0.406]) * 255
STD = torch.tensor([0.229, 0.224, 0.225]) * 255


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="shard URL pattern(s), comma-separated")
    ap.add_argument("--samples", type=int, default=None,
                    help="samples in the dataset (optional: fixes the steps per epoch)")
    ap.add_argument("--index", default=None, help="dataset index from `stoker index`")
    ap.add_argument("--val-data", default=None,
                    help="validation shard URL pattern(s), comma-separated: evaluated after each "
                         "epoch, every sample once across the ranks")
    ap.add_argument("--cluster", default=None,
                    help="Dask scheduler address: CPU-only workers decode too (needs --index)")
    ap.add_argument("--batches-per-task", type=int, default=None,
                    help="batches a Dask task makes (default: two shuffle windows' worth)")
    ap.add_argument("--checkpoint-every", type=int, default=1000, help="steps")
    ap.add_argument("--print-every", type=int, default=100, help="steps")
    ap.add_argument("--max-steps", type=int, default=None,
                    help="stop after this many steps in all (checkpointed), e.g. to test --resume")
    ap.add_argument("--classes", type=int, default=None,
                    help="number of classes (default: len(loader.classes), else 1000)")
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--batch-size", type=int, default=256, help="per rank")
    ap.add_argument("--epochs", type=int, default=90)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--threads", type=int, default=None, help="stoker decode threads per rank")
    ap.add_argument("--parallel", choices=["ddp", "fsdp"], default="ddp")
    ap.add_argument("--checkpoint", default="checkpoint.pt")
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--logdir", default=None, help="TensorBoard directory (if tensorboard is installed)")
    ap.add_argument("--prometheus-port", type=int, default=None,
                    help="serve the loader's metrics at 127.0.0.1:PORT+RANK/metrics")
    ap.add_argument("--cpu", action="store_true", help="run on CPU (gloo), float32")
    return ap.parse_args()


def setup_distributed(cpu):
    if "RANK" not in os.environ:
        return 0, 1, torch.device("cpu" if cpu else "cuda")
    dist.init_process_group("gloo" if cpu else "nccl")
    rank = dist.get_rank()
    if cpu:
        return rank, dist.get_world_size(), torch.device("cpu")
    local = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local)
    return rank, dist.get_world_size(), torch.device("cuda", local)


def wrap(model, args, device):
    if not dist.is_initialized():
        return model
    if args.parallel == "fsdp":
        from torch.distributed.fsdp import FullyShardedDataParallel
        return FullyShardedDataParallel(model, device_id=None if args.cpu else device)
    return torch.nn.parallel.DistributedDataParallel(model, device_ids=None if args.cpu else [device])


def val_loader(urls, image_size, batch_size, threads=None, index=None):
    """The validation set as torchvision's reference evaluates it with
    DistributedSampler(shuffle=False): resize + center crop, and with
    uneven=True every sample exactly once across the ranks (each rank reads
    its own shards; ranks may take different numbers of batches)."""
    return stoker.Loader(urls, batch_size=batch_size, image_size=image_size, transform="eval",
                         shuffle=False, uneven=True, threads=threads, index=index)


def evaluate(model, loader, device):
    """Top-1 accuracy over the whole validation set and the number of
    samples it counts. Each rank evaluates the samples its loader gives it
    (uneven=True: a different number of batches per rank), so nothing inside
    the loop may be a collective: the forward runs on the module DDP wraps
    (DDP's own forward may broadcast buffers), FSDP's parameters are
    gathered once before the loop. The counts are summed over the ranks
    after it, in one all_reduce."""
    module = model.module if isinstance(model, torch.nn.parallel.DistributedDataParallel) else model
    gathered = contextlib.nullcontext()
    if type(model).__name__ == "FullyShardedDataParallel":
        gathered = model.summon_full_params(model)
    mean = MEAN.view(1, 3, 1, 1).to(device)
    std = STD.view(1, 3, 1, 1).to(device)
    counts = torch.zeros(2, dtype=torch.int64, device=device)  # correct, seen
    model.eval()
    with gathered, torch.inference_mode():
        for images, labels in loader:
            x = ((images.to(device).float() - mean) / std).contiguous(memory_format=torch.channels_last)
            labels = labels.to(device)
            counts[0] += (module(x).argmax(1) == labels).sum()
            counts[1] += labels.numel()
    if dist.is_initialized():
        dist.all_reduce(counts)
    correct, seen = counts.tolist()
    return correct / max(seen, 1), seen


def tensorboard(args, rank):
    if args.logdir is None or rank != 0:
        return None
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        print("tensorboard is not installed; no scalars written")
        return None
    return SummaryWriter(args.logdir)


def main():
    args = parse_args()
    rank, world, device = setup_distributed(args.cpu)
    amp = not args.cpu
    loader = stoker.Loader(args.data.split(","), batch_size=args.batch_size,
                           image_size=args.image_size, transform="train", dtype=torch.uint8,
                           threads=args.threads, index=args.index, cluster=args.cluster,
                           batches_per_task=args.batches_per_task,
                           samples_per_rank=args.samples // world if args.samples else None,
                           drop_last=True, seed=1234,
                           prometheus_port=None if args.prometheus_port is None
                           else args.prometheus_port + rank)
    val = None if args.val_data is None else val_loader(
        args.val_data.split(","), args.image_size, args.batch_size, args.threads)
    num_classes = args.classes or (len(loader.classes) if loader.classes else 1000)
    model = torchvision.models.__dict__[args.model](num_classes=num_classes).to(device)
    if rank == 0:
        print(f"{args.model}, {num_classes} classes, {len(loader)} steps per epoch")
    model = model.to(memory_format=torch.channels_last)
    model = wrap(model, args, device)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=args.epochs)
    start_epoch = 0
    step = 0

    def save(epoch_done):
        if rank == 0:  # the loader state is the same on every rank but for its rank
            torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                        "scheduler": sched.state_dict(), "loader": loader.state_dict(),
                        "epoch_done": epoch_done, "step": step}, args.checkpoint + ".tmp")
            os.replace(args.checkpoint + ".tmp", args.checkpoint)

    if args.resume and os.path.exists(args.checkpoint):
        state = torch.load(args.checkpoint, map_location="cpu")
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["scheduler"])
        step = state["step"]
        start_epoch = state["loader"]["epoch"] + (1 if state["epoch_done"] else 0)
        if not state["epoch_done"]:  # mid-epoch: set_epoch(start_epoch) keeps the saved batch
            loader.load_state_dict(state["loader"])
    mean = MEAN.view(1, 3, 1, 1).to(device)
    std = STD.view(1, 3, 1, 1).to(device)
    writer = tensorboard(args, rank)
    for epoch in range(start_epoch, args.epochs):
        loader.set_epoch(epoch)
        steps = len(loader)  # as the reference's logger asks on the first step
        model.train()
        waited = 0.0
        seen = 0
        loss = None
        t_epoch = time.perf_counter()
        t_wait = time.perf_counter()
        for images, labels in loader:
            waited += time.perf_counter() - t_wait
            images = images.to(device, non_blocking=True)
            labels = labels.to(device, non_blocking=True)
            x = ((images.float() - mean) / std).contiguous(memory_format=torch.channels_last)
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
                loss = F.cross_entropy(model(x), labels)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            seen += images.shape[0]
            step += 1
            if rank == 0 and step % args.print_every == 0:
                print(f"epoch {epoch} [{loader.state_dict()['batch']}/{steps}] loss {loss.item():.3f}")
            if writer is not None and step % 10 == 0:
                writer.add_scalar("train/loss", loss.item(), step)
                # images/s, the share of time this loop waited for batches and
                # each loader stage's busy share over the last 10 steps
                stoker.tensorboard(writer, loader, step)
            if step % args.checkpoint_every == 0 or step == args.max_steps:
                save(epoch_done=False)
            if step == args.max_steps:
                print(f"stopped at step {step} (epoch {epoch}, batch {loader.state_dict()['batch']})")
                return
            t_wait = time.perf_counter()
        sched.step()
        elapsed = time.perf_counter() - t_epoch
        if rank == 0:
            print(f"epoch {epoch}: step {step}, loss {loss.item() if loss is not None else float('nan'):.3f}, "
                  f"{seen * world / elapsed:.0f} images/s, "
                  f"waiting for data {100 * waited / elapsed:.1f}% of the time")
            print(loader.report(), end="")  # input-bound? which stage limits?
        if val is not None:
            acc1, seen = evaluate(model, val, device)
            if rank == 0:
                print(f"epoch {epoch}: validation accuracy {acc1:.4f} over {seen} samples")
        save(epoch_done=True)
    loader.close()
    if val is not None:
        val.close()
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
