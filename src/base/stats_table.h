/* SPDX-License-Identifier: MIT */
/*
 * stats_table.h - the one schema of struct stk_stats and of the library's
 * counters (base/run.h).
 *
 * Every field of struct stk_stats (all uint64_t), in order: the counters
 * struct and its snapshot (run.c), stats() keys, `stoker bench --json`,
 * report() and Python's Prometheus metrics read them through this list.
 * Adding a counter is a field at the end of struct stk_stats (stoker.h,
 * with its documentation) plus one row here; options.c refuses to compile
 * when the two disagree in size.
 *
 * X(name, kind, doc)
 *   kind: COUNT (only grows), NS (time summed over threads, only grows),
 *         GAUGE (a current value: may go down)
 */
#ifndef STK_STATS_TABLE_H
#define STK_STATS_TABLE_H

/* clang-format off */
#define STK__STATS(X) \
    X(shards_opened, COUNT, "shards opened") \
    X(shards_failed, COUNT, "shards cut short by an error under on_error=skip") \
    X(shards_empty, COUNT, "shards read to their end without a sample") \
    X(samples, COUNT, "samples delivered in batches") \
    X(samples_skipped, COUNT, "bad samples skipped under on_error=skip") \
    X(members_ignored, COUNT, "directories, links and members without a key") \
    X(batches, COUNT, "batches delivered") \
    X(bytes_read, COUNT, "bytes read from shard sources (compressed size)") \
    X(member_bytes, COUNT, "bytes of member data delivered") \
    X(images_decoded, COUNT, "images decoded") \
    X(images_replaced, COUNT, "bad images replaced by another of their batch (on_error=skip)") \
    X(decode_ns, NS, "time decoding and transforming, all threads (ns)") \
    X(samples_read, COUNT, "samples read from shards, also those a resume drops") \
    X(samples_passed_over, COUNT, "samples a resume read to reach its start in a compressed shard") \
    X(cache_hits, COUNT, "shards read from a complete cached copy") \
    X(cache_misses, COUNT, "shards this loader downloaded into the cache") \
    X(cache_evictions, COUNT, "shards this loader evicted from the cache") \
    X(cache_bytes_written, COUNT, "bytes this loader wrote into the cache") \
    X(retries, COUNT, "remote requests repeated after a transient failure") \
    X(resumes, COUNT, "retries that continued a shard from a byte offset") \
    X(read_ns, NS, "reader threads opening, fetching and parsing shards (ns)") \
    X(image_decode_ns, NS, "JPEG/PNG decoding (ns)") \
    X(image_resample_ns, NS, "resizing crops, and the dtype/layout conversion fused into it (ns)") \
    X(image_convert_ns, NS, "dtype/layout conversion as a pass of its own (padded eval crops) (ns)") \
    X(wait_ns, NS, "callers blocked waiting for a batch (ns)") \
    X(sequence_ns, NS, "the thread that interleaves, shuffles and assembles batches (ns)") \
    X(wall_ns, NS, "since the loader's first batch was asked for (ns)") \
    X(read_threads, GAUGE, "reader threads of the current or last epoch") \
    X(decode_threads, GAUGE, "image threads (0 without a transform)") \
    X(shuffle_pairs, COUNT, "sum of b(b-1) over batches of b samples (shuffle quality, k_eff)") \
    X(shuffle_shard_pairs, COUNT, "sum of n(n-1) over the samples n a batch takes from one shard") \
    X(shuffle_shards_sized, COUNT, "shards taken whole, whose sample counts are known") \
    X(shuffle_sized_samples, COUNT, "samples of those shards") \
    X(shuffle_sized_pairs, COUNT, "sum of m(m-1) over those shards of m samples") \
    X(shuffle_epoch_shards, GAUGE, "shards of this rank's epoch") \
    X(image_augment_ns, NS, "auto_augment, ColorJitter, grayscale and blur on the crops (ns)") \
    X(image_erase_ns, NS, "random erasing (ns)") \
    X(batch_mix_ns, NS, "Mixup and CutMix of batches (ns)") \
    X(label_pairs, COUNT, "sum of b(b-1) over batches delivered with labels (label mixing)") \
    X(label_same_pairs, COUNT, "sum of n(n-1) over the samples n a batch has of one label") \
    X(label_distinct, COUNT, "distinct labels of each batch, summed") \
    X(label_batches, COUNT, "batches whose labels were counted") \
    X(label_samples, COUNT, "labels counted (N)") \
    X(label_sample_pairs, COUNT, "sum of N_c(N_c-1) over the labels c seen, N_c samples each") \
    STK__AUG_OP_STATS(STK__AUG_OP_ROWS, X) \
    X(samples_padded, GAUGE, "samples this rank's epoch repeats so that every rank gets an equal share") \
    X(cred_refreshes, COUNT, "temporary cloud credentials fetched (token endpoint, metadata server, STS)") \
    X(cache_epoch_hits, GAUGE, "cache_hits since the current epoch started") \
    X(cache_epoch_misses, GAUGE, "cache_misses since the current epoch started") \
    X(cache_epoch_origin_bytes, GAUGE, "bytes this loader downloaded into the cache since the current epoch started") \
    X(samples_read_ahead, COUNT, "samples an epoch read before the loop asked for it, while the last epoch's tail was delivered") \
    X(samples_fast_start, COUNT, "samples of an epoch's first batches read at their offsets while its shuffle window filled (sequential_start)")

/* The augmentation operations on the crop timed one by one, each with two
 * counters at the end of struct stk_stats: aug_NAME_ns, its time on the
 * crops, and aug_NAME_runs, how many times it ran (auto_augment's ops and
 * ColorJitter's of the same name count together). Y(X, name, label, op):
 * op is the enum stk__aug_op (image/augment_ops.h) it times, resolved
 * where the list is expanded. */
#define STK__AUG_OP_STATS(Y, X) \
    Y(X, shear_x, "ShearX", STK__OP_SHEAR_X) \
    Y(X, shear_y, "ShearY", STK__OP_SHEAR_Y) \
    Y(X, translate_x, "TranslateX", STK__OP_TRANSLATE_X) \
    Y(X, translate_y, "TranslateY", STK__OP_TRANSLATE_Y) \
    Y(X, rotate, "Rotate", STK__OP_ROTATE) \
    Y(X, brightness, "Brightness", STK__OP_BRIGHTNESS) \
    Y(X, color, "Color (saturation)", STK__OP_COLOR) \
    Y(X, contrast, "Contrast", STK__OP_CONTRAST) \
    Y(X, sharpness, "Sharpness", STK__OP_SHARPNESS) \
    Y(X, posterize, "Posterize", STK__OP_POSTERIZE) \
    Y(X, solarize, "Solarize", STK__OP_SOLARIZE) \
    Y(X, autocontrast, "AutoContrast", STK__OP_AUTOCONTRAST) \
    Y(X, equalize, "Equalize", STK__OP_EQUALIZE) \
    Y(X, invert, "Invert", STK__OP_INVERT) \
    Y(X, hue, "Hue", STK__OP_HUE) \
    Y(X, grayscale, "Grayscale", STK__OP_GRAYSCALE) \
    Y(X, blur, "GaussianBlur", STK__OP_BLUR)
#define STK__AUG_OP_ROWS(X, name, label, op) \
    X(aug_##name##_ns, NS, label " on the crops (ns)") \
    X(aug_##name##_runs, COUNT, "times " label " ran on a crop")
/* clang-format on */

#endif
