/* SPDX-License-Identifier: MIT */
/*
 * options_table.h - the one schema of struct stk_options (struct stk_stats
 * has its own table, base/stats_table.h).
 *
 * Every option that can be given by name (stk_options_set(), the stoker
 * command's flags, Python keyword arguments) is one row here: its field,
 * type, default, accepted range, where the command line takes it and a
 * one-line meaning. stk_options_init() sets the defaults from it,
 * stk_loader_create() checks ranges against it, the command line builds
 * its flags and --help from it and the Python module its keyword arguments
 * and help(stoker.Loader). Adding an option is a field in struct
 * stk_options (stoker.h, with its full documentation) plus one row here;
 * options.c refuses to compile when the row's type and the field disagree.
 * The callbacks (log, alloc_batch_memory, ...) cannot be given as text and
 * have no row.
 *
 * X(name, type, flags, default, min, max, cli_name, metavar, doc)
 *   type: BOOL (int, 0 or 1), INT (int), UINT (unsigned), SIZE (size_t),
 *         U64 (uint64_t), FLOAT, FLOAT3 (float[3]), CHOICE (an enum whose
 *         values are the positions of the comma-separated names in
 *         metavar), STRING (const char *, borrowed; default NULL: none)
 *   flags: STK_OPTION_BYTES (takes K, M, G, T suffixes),
 *          STK_OPTION_SPEED_ONLY (changes speed or limits, never the batches:
 *          a saved Python loader state survives a change),
 *          and one bit per command of the stoker program that takes it as
 *          --cli_name: STK__BENCH, STK__LS, STK__CAT, STK__INDEX,
 *          STK__VERIFY, STK__RESHARD; STK__SOURCE is all of them (the
 *          options every command that reads shards shares). Giving a
 *          command an option is its bit in the row.
 *   min, max: integers only; the default is accepted besides (-1: auto)
 *   cli_name: the flag without its dashes (a BOOL flag defaulting to 1 is
 *             --no-NAME), NULL where the command line does not take it
 */
#ifndef STK_OPTIONS_TABLE_H
#define STK_OPTIONS_TABLE_H

#include <limits.h>
#include <stdint.h>

#define STK__BENCH STK_OPTION_CLI_BENCH
#define STK__LS STK_OPTION_CLI_LS
#define STK__CAT STK_OPTION_CLI_CAT
#define STK__INDEX STK_OPTION_CLI_INDEX
#define STK__VERIFY STK_OPTION_CLI_VERIFY
#define STK__RESHARD STK_OPTION_CLI_RESHARD
#define STK__SOURCE STK_OPTION_CLI_SOURCE
#define STK__BYTES STK_OPTION_BYTES
#define STK__SPEED STK_OPTION_SPEED_ONLY
/* GaussianBlur's largest kernel (augment_ops.h says why it is bounded) */
#define STK__AUG_BLUR_KERNEL_MAX 63

/* clang-format off */
#define STK__OPTIONS(X) \
    X(batch_size, SIZE, STK__BENCH, "64", 1, 1u << 24, "batch-size", "N", \
      "samples per batch") \
    X(drop_last, BOOL, 0, "0", 0, 1, NULL, NULL, \
      "drop a final batch smaller than batch_size") \
    X(threads, UINT, STK__BENCH | STK__INDEX | STK__VERIFY | STK__SPEED, "2", 1, 1024, \
      "threads", "N", \
      "reader and decode threads: they change the speed, never the samples") \
    X(shards_in_flight, UINT, STK__BENCH | STK__RESHARD, "16", 1, 4096, "shards-in-flight", "N", \
      "shards read and interleaved at once (part of the sample order; more mix sorted shards better)") \
    X(shuffle_buffer, SIZE, STK__BENCH | STK__RESHARD, "2000", 0, 1u << 24, "shuffle-buffer", "N", \
      "reach of the sample shuffle: each sample goes out within this many inputs (0 or 1: none)") \
    X(shuffle_buffer_bytes, SIZE, STK__BENCH | STK__RESHARD | STK__BYTES | STK__SPEED, "2G", 1, \
      SIZE_MAX, \
      "shuffle-buffer-bytes", "SIZE", \
      "member bytes held between the tar reader and the batches (read ahead, queued per " \
      "shard, in the shuffle); readers wait for room; a window that cannot fit fails") \
    X(shuffle, BOOL, STK__BENCH, "1", 0, 1, "shuffle", NULL, \
      "shuffle shard order and samples (0: storage order)") \
    X(seed, U64, STK__BENCH, "0", 0, UINT64_MAX, "seed", "N", \
      "seed of every random choice") \
    X(epoch, U64, 0, "0", 0, UINT64_MAX, NULL, "N", \
      "epoch to produce (its shuffle)") \
    X(rank, INT, STK__BENCH, "-1", 0, INT_MAX, "rank", "N", \
      "this process's rank (-1: RANK, SLURM_PROCID or OMPI_COMM_WORLD_RANK, else 0)") \
    X(world_size, INT, STK__BENCH, "-1", 1, INT_MAX, "world-size", "N", \
      "number of ranks (-1: WORLD_SIZE, SLURM_NTASKS or OMPI_COMM_WORLD_SIZE, else 1)") \
    X(samples_per_rank, U64, STK__BENCH, "0", 1, UINT64_MAX, "samples-per-rank", "N", \
      "samples every rank yields per epoch, equal on all ranks (0: all of its shards)") \
    X(on_error, CHOICE, STK__BENCH | STK__LS | STK__INDEX | STK__RESHARD, "fail", 0, 0, \
      "on-error", "fail,skip", \
      "bad input fails the epoch, or is skipped and counted") \
    X(read_buffer_bytes, SIZE, STK__BENCH | STK__BYTES | STK__SPEED, "256K", 512, 256u << 20, \
      "read-buffer-bytes", "SIZE", \
      "read size per shard") \
    X(prefetch_bytes_per_shard, SIZE, STK__BENCH | STK__BYTES | STK__SPEED, "2M", 0, SIZE_MAX, \
      "prefetch-bytes-per-shard", "SIZE", \
      "samples read ahead per shard, in bytes") \
    X(max_batches, SIZE, STK__BENCH | STK__SPEED, "4", 1, 4096, "max-batches", "N", \
      "batches queued or held by the caller at once") \
    X(max_member_bytes, U64, STK__BYTES, "256M", 1, (uint64_t)1 << 40, NULL, "SIZE", \
      "larger members are bad input") \
    X(max_members_per_sample, SIZE, 0, "64", 1, SIZE_MAX, NULL, "N", \
      "samples with more members are bad input") \
    X(max_key_bytes, SIZE, 0, "4096", 1, SIZE_MAX, NULL, "N", \
      "longest accepted member name") \
    X(max_samples_per_shard, U64, STK__SOURCE, "1000000", 1, (uint64_t)1 << 32, \
      "max-samples-per-shard", "N", \
      "a shard holding more samples fails (about 32 bytes of memory per sample)") \
    X(transform, CHOICE, STK__BENCH, "none", 0, 0, "decode", "none,train,eval", \
      "raw samples, RandomResizedCrop + flip (train), or resize + center crop (eval)") \
    X(image_size, UINT, STK__BENCH, "224", 1, 8192, "size", "N", \
      "output height and width of images") \
    X(dtype, CHOICE, STK__BENCH, "uint8", 0, 0, "dtype", "uint8,float32,float16,bfloat16", \
      "element type of image batches (floats are normalized with mean and std)") \
    X(layout, CHOICE, STK__BENCH, "nchw", 0, 0, "layout", "nchw,nhwc", \
      "layout of image batches") \
    X(mean, FLOAT3, 0, "0.485,0.456,0.406", 0, 0, NULL, "R,G,B", \
      "per channel mean subtracted from float outputs (of pixel / 255)") \
    X(std, FLOAT3, 0, "0.229,0.224,0.225", 0, 0, NULL, "R,G,B", \
      "per channel standard deviation dividing float outputs") \
    X(scale_min, FLOAT, 0, "0.08", 0, 0, NULL, "X", \
      "smallest crop area of the train transform, as a share of the image") \
    X(scale_max, FLOAT, 0, "1", 0, 0, NULL, "X", \
      "largest crop area of the train transform, as a share of the image") \
    X(ratio_min, FLOAT, 0, "3/4", 0, 0, NULL, "X", \
      "smallest crop aspect ratio of the train transform") \
    X(ratio_max, FLOAT, 0, "4/3", 0, 0, NULL, "X", \
      "largest crop aspect ratio of the train transform") \
    X(flip_probability, FLOAT, 0, "0.5", 0, 0, NULL, "X", \
      "probability of a horizontal flip in the train transform") \
    X(label_exts, STRING, STK__VERIFY, "cls", 0, 0, "label-exts", "EXTS", \
      "label members, first found wins (\"\": unlabelled, every label -1)") \
    X(label_json_field, STRING, STK__VERIFY, NULL, 0, 0, "label-json", "FIELD", \
      "take the label from this integer field of the json member instead") \
    X(max_image_pixels, U64, STK__VERIFY, "100000000", 1, UINT64_MAX, "max-pixels", "N", \
      "larger images are bad input (decompression bombs)") \
    X(full_decode, BOOL, STK__BENCH, "0", 0, 1, "full-decode", NULL, \
      "decode whole images at full scale (slower; for comparisons)") \
    X(dct_margin, FLOAT, STK__BENCH, "0", 0, 0, "dct-margin", "X", \
      "decode JPEG crops at the smallest DCT scale keeping them X times the output " \
      "(1 to 8; 0: 1.25 train, 1.5 eval)") \
    X(recipe, CHOICE, STK__BENCH, "none", 0, 0, "recipe", "none,torchvision-v2", \
      "preset: torchvision's reference recipe for the options left at 0/none (see stoker.h)") \
    X(eval_resize, UINT, STK__BENCH, "0", 1, 8192, "eval-resize", "N", \
      "eval: resize the short side to N before the center crop (0: size / 0.875)") \
    X(interpolation, CHOICE, STK__BENCH, "bilinear", 0, 0, "interpolation", "bilinear,bicubic", \
      "filter resizing the crop, Pillow's antialiased bilinear or bicubic (as torchvision on PIL)") \
    X(ra_reps, UINT, STK__BENCH, "0", 1, 64, "ra-reps", "N", \
      "repeated augmentation: each sample N times per epoch, own draws, the copies dealt " \
      "round robin over the ranks (0: 1)") \
    X(auto_augment, CHOICE, STK__BENCH, "none", 0, 0, "auto-augment", "none,ta_wide,ra,imagenet", \
      "train: TrivialAugmentWide, RandAugment or AutoAugment's ImageNet policy on the crop") \
    X(augment_interpolation, CHOICE, STK__BENCH, "nearest", 0, 0, "augment-interpolation", \
      "nearest,bilinear", "sampling of the geometric augmentations") \
    X(augment_magnitude_bins, UINT, STK__BENCH, "0", 2, 1000, "magnitude-bins", "N", \
      "magnitude bins of TrivialAugmentWide and RandAugment (0: 31)") \
    X(ra_num_ops, UINT, STK__BENCH, "0", 1, 16, "ra-num-ops", "N", \
      "operations RandAugment applies per image (0: 2)") \
    X(ra_magnitude, UINT, STK__BENCH, "0", 1, 999, "ra-magnitude", "N", \
      "RandAugment's magnitude bin, below augment_magnitude_bins (0: 9)") \
    X(color_jitter, FLOAT, STK__BENCH, "0", 0, 0, "color-jitter", "X", \
      "train: ColorJitter(brightness=contrast=saturation=X), torchvision's random order") \
    X(hue_jitter, FLOAT, STK__BENCH, "0", 0, 0, "hue-jitter", "X", \
      "train: ColorJitter's hue (0 to 0.5)") \
    X(grayscale_probability, FLOAT, STK__BENCH, "0", 0, 0, "grayscale", "P", \
      "train: RandomGrayscale probability") \
    X(blur_kernel, UINT, STK__BENCH, "0", 1, STK__AUG_BLUR_KERNEL_MAX, "blur-kernel", "N", \
      "train: GaussianBlur kernel size, odd (0: no blur)") \
    X(blur_sigma_min, FLOAT, 0, "0", 0, 0, NULL, "X", \
      "GaussianBlur's smallest sigma (0: 0.1)") \
    X(blur_sigma_max, FLOAT, 0, "0", 0, 0, NULL, "X", \
      "GaussianBlur's largest sigma (0: 2.0)") \
    X(random_erase, FLOAT, STK__BENCH, "0", 0, 0, "random-erase", "P", \
      "train: RandomErasing probability (value 0 after normalization)") \
    X(random_erase_value, CHOICE, STK__BENCH, "zero", 0, 0, "random-erase-value", "zero,random", \
      "RandomErasing's value: 0, or a standard normal per element after normalization") \
    X(mixup_alpha, FLOAT, STK__BENCH, "0", 0, 0, "mixup-alpha", "X", \
      "Mixup of whole batches with lambda ~ Beta(X, X) (0: off)") \
    X(cutmix_alpha, FLOAT, STK__BENCH, "0", 0, 0, "cutmix-alpha", "X", \
      "CutMix of whole batches with lambda ~ Beta(X, X) (0: off)") \
    X(num_classes, UINT, 0, "0", 1, 1u << 24, NULL, "N", \
      "Python, with Mixup/CutMix: soft one-hot targets of N classes (0: label pairs)") \
    X(mix_switch_probability, FLOAT, STK__BENCH, "0", 0, 0, "mix-switch-probability", "P", \
      "with both alphas: probability a batch gets CutMix rather than Mixup (0: 0.5)") \
    X(index_path, STRING, STK__BENCH, NULL, 0, 0, "index", "FILE", \
      "dataset index from `stoker index`: equal shares per rank, fast resume") \
    X(cache_dir, STRING, STK__BENCH | STK__LS | STK__CAT | STK__RESHARD | STK__SPEED, NULL, 0, 0, \
      "cache-dir", "DIR", \
      "node-local cache of remote shards, shared by the node's processes") \
    X(cache_size, U64, STK__SOURCE | STK__BYTES | STK__SPEED, "0", 1, UINT64_MAX, "cache-size", "SIZE", \
      "bound on the cache directory (required with cache_dir)") \
    X(io_timeout_ms, UINT, STK__SOURCE | STK__SPEED, "30000", 1, 3600000, "io-timeout-ms", "N", \
      "connect timeout, and how long a transfer may stall before a retry") \
    X(io_retries, UINT, STK__SOURCE | STK__SPEED, "5", 0, 1000, "io-retries", "N", \
      "failed attempts in a row retried before a shard fails") \
    X(io_backoff_ms, UINT, STK__SOURCE | STK__SPEED, "500", 0, 60000, "io-backoff-ms", "N", \
      "delay before the first retry, doubled per retry") \
    X(io_min_rate, UINT, STK__SOURCE | STK__BYTES | STK__SPEED, "4K", 0, UINT_MAX, "io-min-rate", "SIZE", \
      "slowest stream accepted while waiting for it, bytes per second (0: no limit)") \
    X(allow_pipe, BOOL, STK__SOURCE, "0", 0, 1, "allow-pipe", NULL, \
      "run pipe:COMMAND URLs (split into words, no shell)") \
    X(ca_bundle, STRING, STK__SOURCE | STK__SPEED, NULL, 0, 0, "ca-bundle", "FILE", \
      "CA certificates for https (default: $STOKER_CA_BUNDLE, $CURL_CA_BUNDLE, the system's)") \
    X(image_height, UINT, 0, "0", 1, 8192, NULL, "N", \
      "output height of a non-square image (0: image_size)") \
    X(image_width, UINT, 0, "0", 1, 8192, NULL, "N", \
      "output width of a non-square image (0: image_size)") \
    X(require_members, STRING, 0, NULL, 0, 0, NULL, "EXTS", \
      "other members every sample must hold, e.g. \"txt,json?\" ('?': optional; " \
      "\"txt;json\": either)") \
    X(uneven, BOOL, 0, "0", 0, 1, NULL, NULL, \
      "each rank its own shards once: every sample exactly once across ranks, their batch " \
      "counts uneven (evaluation; 0: equal samples per rank, an index's equal shares)") \
    X(whole_shards, BOOL, 0, "0", 0, 1, NULL, NULL, \
      "with an index and several ranks, each rank reads whole shards (0: each rank an exact " \
      "run of the epoch's samples, shards cut between ranks: every sample once per epoch)") \
    X(window_shuffle, BOOL, 0, "0", 0, 1, NULL, NULL, \
      "with an index over local uncompressed shards, shuffle with the sliding window over " \
      "streamed shards (0: a global random order of the samples, read by offset)") \
    X(node_affinity, INT, STK__BENCH, "-1", 0, 1, "node-affinity", "N", \
      "1: each shard stays on one node for the run, reshuffled within the node each epoch, " \
      "so node caches stay warm (-1: on with a cache_dir and several nodes named by the " \
      "launcher; docs/node-cache.md)") \
    X(ranks_per_node, INT, STK__BENCH, "0", 1, 1000000, "ranks-per-node", "N", \
      "ranks per node for node_affinity (0: LOCAL_WORLD_SIZE or Slurm's tasks per node)") \
    X(epochs, UINT, STK__SPEED, "0", 1, 1u << 30, NULL, NULL, \
      "epochs the caller reads from epoch on (0: as many as it asks for): the next epoch's " \
      "window is read ahead at each boundary but the last") \
    X(sequential_start, BOOL, STK__SPEED | STK__BENCH, "0", 0, 1, "sequential-start", NULL, \
      "1: the first batches of an epoch wait for its shuffle window (0: over local uncompressed " \
      "shards their samples are read by offset meanwhile; for disks where a seek costs more)")

/* clang-format on */

#endif
