/* SPDX-License-Identifier: MIT */
/*
 * stoker.h - the public C API of libstoker.
 *
 * stoker streams training samples out of WebDataset-style tar shards (members
 * "KEY.EXT" grouped by KEY) and hands them to the caller in batches. A loader
 * plans which shards this rank reads for an epoch, reads several of them at
 * once on its own threads, interleaves and shuffles their samples
 * deterministically and delivers batches through stk_loader_next().
 *
 * Conventions (libuv/zstd style):
 *  - functions return 0 on success or a negative STK_E* code; results come
 *    back through out-parameters;
 *  - a failing call on a loader leaves a detailed message (URL, key, byte
 *    offset) readable with stk_loader_errmsg() until the next call on it;
 *  - every *_destroy() accepts NULL;
 *  - one loader is used by one thread at a time; different loaders are
 *    independent. stk_batch_release() may be called from any thread, and
 *    stk_loader_interrupt() and stk_loader_stats() from any thread while
 *    another is inside a call on the same loader.
 *
 * Binary compatibility. libstoker.so.0 keeps a program built against an
 * older 0.x header working with a newer library (and refuses, rather than
 * misreads, what a newer header asks of an older library):
 *  - structs the caller allocates and the library reads or fills
 *    (stk_options, stk_stats) only grow, at their end, and the library is
 *    told the caller's size: stk_options_init() stores it in
 *    stk_options.struct_size, and the functions that take a stk_stats are
 *    macros that pass sizeof(struct stk_stats) of the caller's header.
 *    The library reads and writes only that many bytes; fields the caller's
 *    struct lacks take their default, which for every field added after
 *    0.1 is zero. Options a newer header set that this library does not
 *    know (bytes past its struct that are not zero) are STK_EINVAL;
 *  - stk_member and stk_sample are laid out as arrays (the caller passes
 *    one to stk_writer_add(), indexes stk_batch.samples), so their layout
 *    is frozen; new data comes in new structs. stk_batch is allocated by
 *    the library and only grows at its end;
 *  - enum values and error codes keep their numbers; new ones are added;
 *  - the library exports only the functions declared here (STK_API).
 *
 * Sections, in order: errors, options, the loader, batches, statistics and
 * the input-bound report, dataset index and verification, writing shards,
 * utilities.
 */
#ifndef STOKER_H
#define STOKER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define STK_VERSION_MAJOR 0
#define STK_VERSION_MINOR 1
#define STK_VERSION_PATCH 0
#define STK_VERSION_STRING "0.1.0"

/* Marks the functions libstoker exports; everything else in the library is
 * hidden (built with -fvisibility=hidden). */
#ifndef STK_API
#if defined(__GNUC__) && __GNUC__ >= 4
#define STK_API __attribute__((visibility("default")))
#else
#define STK_API
#endif
#endif

/* ---- Errors ------------------------------------------------------------ */

/*
 * Error codes. Where an errno value fits, the code is its negation
 * (STK_ENOMEM == -ENOMEM on Linux); stoker's own conditions use -1000 and
 * below so they never collide with errno values.
 */
enum stk_error {
    STK_OK = 0,
    STK_ENOMEM = -12,   /* out of memory (-ENOMEM) */
    STK_EINVAL = -22,   /* invalid argument or option (-EINVAL) */
    STK_ENOENT = -2,    /* a shard or member does not exist (-ENOENT) */
    STK_EIO = -5,       /* an I/O error while reading a shard (-EIO) */
    STK_EINTR = -4,     /* stk_loader_next() was interrupted by stk_loader_interrupt() (-EINTR) */
    STK_EEXIST = -17,   /* an output file exists and was not to be replaced (-EEXIST) */
    STK_EOF = -1000,    /* the epoch has no more batches */
    STK_EFORMAT = -1001, /* a shard is not a readable tar archive (also: data
                            other than zeros after its end-of-archive marker, a
                            gzip member whose CRC-32 or length does not match;
                            gzip checks a member at its end, so samples read
                            before are delivered), or a member has holes (a GNU
                            sparse file): see max_member_bytes */
    STK_ETRUNC = -1002,  /* a shard ends in the middle of a member */
    STK_ELIMIT = -1003,  /* a size or count exceeds a configured limit */
    STK_EDUPKEY = -1004, /* a sample key reappears later in a shard */
    STK_EPLAN = -1005,   /* the URLs cannot be split as asked (e.g. too few shards) */
    STK_EBUSY = -1006,   /* the caller holds every batch the loader may have */
    STK_EINTERNAL = -1007, /* a bug in stoker: please report it */
    STK_EDECODE = -1008, /* an image cannot be decoded (corrupt, truncated, unsupported) */
    STK_ELABEL = -1009,  /* a sample has no usable label */
    STK_ECACHE = -1010,  /* the node cache cannot hold or store a shard (cache_size too
                            small, cache disk full or unwritable); never skipped as bad input */
    STK_EHTTP = -1011,   /* a server refused a request (HTTP 4xx) or kept failing (5xx) */
    STK_EMEMBER = -1012, /* a sample lacks a member that stk_options.require_members names,
                            or the member does not parse as its extension says */
    STK_EINDEX = -1013,  /* the dataset index (index_path) is not a stoker index, is
                            malformed, lacks a shard, or is stale: a shard's size, time,
                            ETag or sample count differs from what it records. Never
                            skipped as bad input: run `stoker index` again */
    STK_EACCESS = -1014  /* a server refused the request's credentials (HTTP 401 or 403):
                            an expired token or a missing permission is not bad data,
                            so it is never skipped under STK_ON_ERROR_SKIP */
};

/* Static text for an error code; never NULL, never needs freeing. */
STK_API const char *stk_strerror(int code);

/* Version as a string, e.g. "0.1.0". */
STK_API const char *stk_version(void);

/* What decides the bytes this build delivers, as one line: the version, the
 * source commit it was built from ("-dirty" when the tree had changes,
 * "unknown" outside git) and the versions of libjpeg-turbo, libspng and zlib.
 * Two processes with the same line make the same batches of the same range
 * (the Python package refuses Dask workers whose line differs). Static;
 * thread-safe. */
STK_API const char *stk_build_id(void);

/* What the loader does with a shard or sample it cannot read. */
enum stk_on_error {
    STK_ON_ERROR_FAIL = 0, /* stk_loader_next() returns the error (default) */
    STK_ON_ERROR_SKIP = 1  /* skip the sample (or the rest of a broken shard),
                              count it in stk_stats and report it through
                              stk_options.log */
};

/* What the loader makes of each sample. */
enum stk_transform {
    STK_TRANSFORM_NONE = 0,  /* raw samples: member bytes (default) */
    STK_TRANSFORM_TRAIN = 1, /* RandomResizedCrop(size, scale, ratio) + horizontal flip */
    STK_TRANSFORM_EVAL = 2   /* resize the short side to int(size / 0.875), center-crop size
                                (non-square: see image_height, image_width) */
};

/* Augmentation policy of the train transform, after the crop (the values
 * of torchvision's classification reference's --auto-augment). */
enum stk_auto_augment {
    STK_AUTO_AUGMENT_NONE = 0,
    STK_AUTO_AUGMENT_TA_WIDE = 1,  /* TrivialAugmentWide(augment_magnitude_bins) */
    STK_AUTO_AUGMENT_RA = 2,       /* RandAugment(ra_num_ops, ra_magnitude, augment_magnitude_bins) */
    STK_AUTO_AUGMENT_IMAGENET = 3  /* AutoAugment(AutoAugmentPolicy.IMAGENET) */
};

/* Presets of augmentation options (stk_options.recipe). */
enum stk_recipe {
    STK_RECIPE_NONE = 0,
    /* torchvision's classification reference, "new recipe" (2021):
     * --auto-augment ta_wide --random-erase 0.1 --mixup-alpha 0.2
     * --cutmix-alpha 1.0 --interpolation bilinear --val-resize-size 232
     * (with image_size 176 to train and 224 to evaluate) */
    STK_RECIPE_TORCHVISION_V2 = 1
};

/* Interpolation of the geometric augmentations (grid_sample's modes). */
enum stk_interpolation { STK_INTERPOLATION_NEAREST = 0, STK_INTERPOLATION_BILINEAR = 1 };

/* Filter of the crop's resize (stk_options.interpolation): Pillow's, as
 * torchvision's Resize and RandomResizedCrop run it on PIL images. */
enum stk_resize_interpolation { STK_RESIZE_BILINEAR = 0, STK_RESIZE_BICUBIC = 1 };

/* What RandomErasing writes into its box (stk_options.random_erase_value). */
enum stk_erase_value { STK_ERASE_ZERO = 0, STK_ERASE_RANDOM = 1 };

/* Element type and layout of image batches. */
enum stk_dtype { STK_DTYPE_UINT8 = 0, STK_DTYPE_FLOAT32 = 1, STK_DTYPE_FLOAT16 = 2, STK_DTYPE_BFLOAT16 = 3 };
enum stk_layout { STK_LAYOUT_NCHW = 0, STK_LAYOUT_NHWC = 1 };

/* Severity passed to the log callback. */
enum stk_log_level { STK_LOG_ERROR = 0, STK_LOG_WARN = 1, STK_LOG_INFO = 2 };

/* ---- Options ----------------------------------------------------------- */

/*
 * Loader options. Always start from stk_options_init(): new fields get safe
 * defaults, so code written against an older header keeps working.
 */
struct stk_options {
    /* sizeof(struct stk_options) in the caller's header, set by
     * stk_options_init(); see "Binary compatibility" above. */
    size_t struct_size;

    /* Samples per batch (default 64). */
    size_t batch_size;
    /* Drop a final batch with fewer than batch_size samples (default 0). */
    int drop_last;

    /* Reader threads (default 2). They only add parallelism: the sample
     * sequence does not depend on this value. Values above shards_in_flight
     * add nothing. */
    unsigned threads;
    /* Shards read at once and interleaved (default 16; at most the rank's
     * shards). Part of the sample sequence: changing it changes the order.
     * More mix shards written in class order better. */
    unsigned shards_in_flight;
    /* Reach of the sample shuffle (default 2000): each sample of the
     * interleaved shards goes out within a sliding window of this many
     * inputs (a random sort key within it), so the shuffle holds about
     * half as many samples, this many at an epoch's start and at most
     * twice as many. The first batch waits for the first window. 0 or 1
     * disables sample shuffling. */
    size_t shuffle_buffer;
    /* Member bytes the shuffle may hold (default 2 GiB). Its reach is
     * counted in samples so that the sequence depends on sample counts
     * alone (stk_loader_seek plans it from a dataset index); samples that
     * would hold more fail the epoch with STK_ELIMIT and a message giving
     * the shuffle_buffer that fits (also under STK_ON_ERROR_SKIP: the data
     * is fine, the configuration is not). For samples of S bytes, keep
     * 2 * shuffle_buffer * S below it. A reach of one sample
     * (shuffle_buffer 0 or 1) is never refused. */
    size_t shuffle_buffer_bytes;
    /* Shuffle shard order, interleave shards and shuffle samples (default 1).
     * With 0 the samples come in exact storage order: shard by shard in the
     * order the URLs were given, members in tar order. */
    int shuffle;
    /* Seed of every random choice (default 0). */
    uint64_t seed;
    /* Epoch to produce (default 0); see also stk_loader_set_epoch(). */
    uint64_t epoch;

    /* This process's rank and the number of ranks. -1 (default) reads
     * RANK/WORLD_SIZE, SLURM_PROCID/SLURM_NTASKS or
     * OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE, else 0 of 1. */
    int rank;
    int world_size;

    /* Samples this rank yields per epoch; 0 (default) means "all samples of
     * this rank's shards", which differs between ranks when shards differ.
     * Set it so that every rank yields exactly the same number of batches:
     * the rank cycles through its shards again (a new shard order per pass)
     * when they hold fewer samples, and stops early when they hold more. */
    uint64_t samples_per_rank;

    /* Bad input policy (default STK_ON_ERROR_FAIL). */
    enum stk_on_error on_error;

    /* Budgets. Memory held by a loader is bounded by roughly
     *   shards_in_flight * read_buffer_bytes
     * + shards_in_flight * prefetch_bytes_per_shard
     * + shards_in_flight * the tags of the keys seen in a shard (about 32
     *   bytes per sample of the shard, see max_samples_per_shard)
     * + the shuffle: up to 2 * shuffle_buffer samples, at most
     *   shuffle_buffer_bytes of member data (or one sample)
     * + max_batches * batch_size * (largest sample): for large samples
     *   set batch_size (and max_batches) for them, this term is not capped
     * + idle member buffers kept for reuse (up to shards_in_flight *
     *   prefetch_bytes_per_shard + 64 MiB)
     * + with a transform: max_batches image buffers of batch_size images, and
     *   per thread one decoded region (at most max_image_pixels * 3 bytes),
     *   for a progressive JPEG its DCT coefficients (also at most
     *   max_image_pixels * 3 bytes, see max_image_pixels) and resampling
     *   scratch. */
    size_t read_buffer_bytes;        /* per shard read size (default 256 KiB: the block
                                        stays in L2 between the read and the copy out) */
    size_t prefetch_bytes_per_shard; /* samples read ahead per shard (default 2 MiB) */
    size_t max_batches;              /* batches queued or held by the caller (default 4) */
    uint64_t max_member_bytes;       /* larger members are bad input (default 256 MiB).
                                        Members with holes (GNU tar --sparse files, or
                                        headers claiming more bytes than the shard stores)
                                        are bad input too (STK_EFORMAT), refused before
                                        their data is read: their size is not bounded by
                                        the shard's */
    size_t max_members_per_sample;   /* default 64 */
    size_t max_key_bytes;            /* longest accepted member name (default 4096) */
    /* Samples a shard may hold (default 1,000,000): the reader keeps a
     * 16-byte tag of every key it has seen in the shard, to catch keys that
     * come back (STK_EDUPKEY), at about 32 bytes per sample (at most 48 MiB
     * per shard being read at the default). The sample past the limit is
     * an STK_ELIMIT error that ends the shard (under STK_ON_ERROR_SKIP the
     * rest of the shard is skipped and the shard counted as failed). */
    uint64_t max_samples_per_shard;

    /* Images. With a transform, every sample must hold an image member
     * (jpg/jpeg/png, the first found) and a label (see label_exts); batches
     * then carry one contiguous tensor of n x 3 x height x width (NCHW) or
     * n x height x width x 3 (NHWC) elements and n int64 labels, written
     * straight into buffers recycled between batches. Random choices (crop
     * box, flip) come from a counter-based generator keyed by (seed, epoch,
     * shard, position in the shard), so they depend neither on threads nor
     * on timing. */
    enum stk_transform transform;
    unsigned image_size;        /* output height and width (default 224); for a
                                   non-square output see image_height and
                                   image_width at the end of this struct */
    enum stk_dtype dtype;       /* default STK_DTYPE_UINT8 */
    enum stk_layout layout;     /* default STK_LAYOUT_NCHW */
    /* Float outputs are (pixel / 255 - mean) / std per channel, as
     * torchvision's ToTensor + Normalize (defaults: ImageNet's). uint8
     * output is never normalized (leave that to the GPU). */
    float mean[3];
    float std[3];
    float scale_min, scale_max; /* RandomResizedCrop area range (0.08, 1) */
    float ratio_min, ratio_max; /* aspect ratio range (3/4, 4/3) */
    float flip_probability;     /* 0.5 */
    /* Label source: the first member found among these comma-separated
     * extensions, which must hold a decimal integer (default "cls"; a .txt
     * member is a caption, read as a label only when named here, e.g.
     * "cls,txt"), or, when label_json_field is set, that integer field of
     * the "json" member. A sample without its label is bad input
     * (STK_ELABEL), as is one whose label member is no integer. "" means
     * unlabelled data: no member is looked for and every label is -1. */
    const char *label_exts;
    const char *label_json_field;
    /* Larger images are rejected before any allocation (decompression
     * bombs); default 100 megapixels. The same bound, max_image_pixels * 3
     * bytes, applies to the DCT coefficients that a progressive (or other
     * multi-scan) JPEG is decoded through, 6 bytes per pixel in 4:4:4, 3 in
     * 4:2:0, 2 in grey: such a 4:4:4 image is refused above
     * max_image_pixels / 2 pixels. A JPEG is also refused (STK_ELIMIT)
     * when it has more than 500 scans or its scans together visit its DCT
     * blocks more than 64 times over (standard progressive files: 4 to 6),
     * so no image costs more time than a few dozen plain decodes. */
    uint64_t max_image_pixels;
    /* Decode every image whole and at full scale instead of only the crop's
     * region at the smallest sufficient DCT scale (default 0). Slower; for
     * comparisons and for checking the fast path. */
    int full_decode;
    /* Optional caller-supplied batch memory (e.g. CUDA-pinned): called once
     * per buffer of the batch ring with its size in bytes, on a loader
     * thread, when a batch needs a buffer and fewer than max_batches exist;
     * returning NULL fails the epoch with STK_ENOMEM. It is never called
     * while the loader holds a lock that stk_batch_release() takes, so it
     * may block on the caller's own locks (a language's global lock) even
     * when the thread releasing batches holds them. free_batch_memory is
     * called for each buffer by stk_loader_destroy(), on the calling
     * thread. The memory must stay valid and in place until then. NULL:
     * the loader allocates. */
    void *(*alloc_batch_memory)(void *data, size_t bytes);
    void (*free_batch_memory)(void *data, void *memory, size_t bytes);
    void *batch_memory_data;

    /* Called from loader threads for skipped input and other events; may be
     * NULL. Must be thread-safe and must not call back into the loader. */
    void (*log)(void *log_data, enum stk_log_level level, const char *message);
    void *log_data;

    /* A dataset index written by stk_index_build() (`stoker index`) for the
     * same URLs, or NULL. It gives every shard's sample count, so:
     * stk_loader_epoch_samples() is known; with several ranks and no
     * samples_per_rank each rank yields floor(total / world_size) samples
     * (equal batches everywhere); and stk_loader_seek() re-reads at most
     * 2 * shuffle_buffer samples instead of the epoch's first part. Read once by
     * stk_loader_create(). The counts are what the loader itself delivers
     * (shards read with the same rules and on_error policy), so they stay
     * exact for damaged shards too. The index also records each shard's
     * size and modification time (ETag for http/s3/gs): a local shard that
     * changed since is refused here, any shard when its source answers,
     * and a count that the shard does not hold when it ends, all with
     * STK_EINDEX ("the index is stale for SHARD: run `stoker index`
     * again"), never skipped as bad input. The index must be a regular
     * file: a FIFO, directory or device at index_path is refused
     * (STK_EINDEX), never waited on. */
    const char *index_path;

    /* Node-local shard cache (default: off). With cache_dir set, remote
     * shards (any URL with a scheme other than file://, and pipe:) are
     * downloaded into cache_dir, once per node, and read as they arrive
     * by the loader that downloads them; other processes and threads
     * sharing the directory wait for the one download in progress and then
     * read the same file. A loader that stops mid-shard abandons its
     * download (nothing cached). A shard appears under its final name
     * only when complete (temp file, fsync, rename), so a process killed
     * mid-download leaves at most a temp file, which the next process
     * removes. Plain paths and file:// URLs are read in place. cache_dir
     * is created if missing (not its parents), mode 0700; the string is
     * copied. The cache is per user: it is shared by the processes of one
     * user on the node, its files are created 0600 whatever the umask, and
     * a cache_dir that belongs to another user or that other users may
     * write to is refused (STK_ECACHE), since they could plant shards.
     * Next to each shard the cache keeps its URL redacted
     * (stk_redact_url()) and a hash of the full URL, never the URL's
     * credentials.
     * cache_size (bytes, required with cache_dir) bounds the total size of
     * the files in cache_dir: least recently used shards that no process
     * is reading are evicted to make room. A shard larger than cache_size,
     * or a cache too small for the shards being read at once on the node,
     * fails with STK_ECACHE and a message saying so, also under
     * STK_ON_ERROR_SKIP (the shard is fine, the configuration is not). */
    const char *cache_dir;
    uint64_t cache_size;

    /* Remote shards: http://, https:// (libcurl; TLS verified, proxies from
     * the usual http_proxy/https_proxy/no_proxy variables), s3://BUCKET/KEY
     * and gs://BUCKET/KEY (signed with AWS SigV4 by libcurl; credentials,
     * region and endpoint from the AWS_* and GCS_* variables and
     * ~/.aws/credentials, see README "S3 and Google Cloud Storage"), and
     * pipe:.
     * A shard is streamed with one request; a failed request (connection
     * error, timeout, HTTP 408/429/5xx, a body shorter than announced) is
     * retried after an exponential backoff with jitter, continuing with a
     * Range request from the first byte not yet received, so no byte is
     * lost or repeated. 4xx answers such as 403 or 404 fail at once.
     * Messages name URLs with credentials redacted (stk_redact_url()). */
    /* Connect timeout, and how long a transfer may deliver no byte before it
     * is retried (default 30000; the stall check has whole-second
     * resolution). */
    unsigned io_timeout_ms;
    /* Failed attempts in a row that are retried before the shard fails
     * (default 5); an attempt that delivered bytes restarts the count. */
    unsigned io_retries;
    /* Delay before the first retry (default 500), doubled per retry up to
     * 20 s, half of it random; a server's Retry-After raises it. */
    unsigned io_backoff_ms;
    /* Slowest stream accepted, in bytes per second (default 4096; 0: no
     * limit). Only the time a reader spends waiting for a stream's bytes
     * counts, so a caller that consumes slowly never makes a stream too
     * slow: each io_timeout_ms of waiting must bring io_min_rate *
     * io_timeout_ms / 1000 bytes, else the attempt is retried (Range
     * resume). A too slow attempt counts as failed even though it brought
     * bytes, so a server that drips fails after io_retries + 1 attempts,
     * naming the rate it gave; a whole transfer thus waits at most about
     * size / io_min_rate + io_timeout_ms per attempt. */
    unsigned io_min_rate;
    /* Accept "pipe:COMMAND" URLs (default 0: refused). COMMAND is split into
     * words without a shell (blanks separate words; '...' and "..." quote,
     * backslash escapes) and run with posix_spawnp; its standard output is
     * the shard, and a non-zero exit status is an error. Only enable it for
     * URL lists you trust: they run programs. Messages and __url__ show the
     * command with what looks like a credential hidden (stk_redact_url()). */
    int allow_pipe;
    /* CA certificates (PEM file) for https://; NULL (default): the variables
     * STOKER_CA_BUNDLE, then CURL_CA_BUNDLE, else the system's store. The
     * string is copied. */
    const char *ca_bundle;

    /* Non-square output (both default 0). Each of image_height and
     * image_width that is 0 takes image_size, so with neither set the
     * output is image_size x image_size. Each is at most 8192. The train
     * transform is torchvision's RandomResizedCrop(size=(height, width)):
     * the crop box is drawn exactly as for a square output (its area and
     * aspect ratio do not depend on the output size) and resampled to
     * height x width. The eval transform is torchvision's
     * Resize(int(min(height, width) / 0.875)) + CenterCrop((height,
     * width)): the short side of the image becomes int(min(height, width) /
     * 0.875), and where the resized image is still smaller than the output
     * in a dimension (a wide output of a square or portrait image) it is
     * padded with black (pixel value 0, normalized like any pixel), split
     * between the two sides as torchvision's CenterCrop splits it. */
    unsigned image_height;
    unsigned image_width;

    /* Other members each sample must hold (with a transform; default NULL
     * or "": none), for callers that use more of a sample than its image
     * and label (captions, metadata): comma-separated extensions, at most
     * 16, each at most 31 bytes. The decode threads check them before the
     * image is decoded; a sample that lacks one, or whose member does not
     * parse as its extension says, is bad input (STK_EMEMBER: the epoch's
     * error, or under STK_ON_ERROR_SKIP a replaced sample, see stk_batch).
     * An extension ending in '?' may be missing, but must parse when
     * present. Alternatives separated by ';' ("jpg;png", as WebDataset
     * writes them) ask for either: the first one the sample has counts. How a member parses depends on the last '.'-separated part
     * of its extension (WebDataset's decoding rule, so "en.txt" is text):
     *   cls, cls2, class, count, index, inx, id: a decimal integer that
     *       fits int64, blanks around it allowed (as labels);
     *   txt, text, transcript: UTF-8 text (strict: no surrogates, no
     *       overlong forms; empty is fine);
     *   json, jsn: one JSON document (UTF-8, nothing after it but blanks);
     *   anything else: any bytes.
     * Read by stk_loader_create() and stk_verify() only. */
    const char *require_members;

    /* Progress of stk_verify() and stk_index_build() (default NULL: none):
     * called after each shard is done with the shards done so far, the
     * shards in all and the samples read so far. Called from their
     * threads, one call at a time; must not call back into stoker. */
    void (*progress)(void *progress_data, uint64_t shards_done, uint64_t shards_total,
                     uint64_t samples);
    void *progress_data;

    /* Fidelity against speed of the JPEG fast path (0: the default of the
     * transform, 1.5 for eval, 1.25 for train; else 1 to 8). A crop is
     * decoded at the smallest DCT scale n/8 that keeps it at least
     * dct_margin times the output size on both axes, then resampled with
     * Pillow's filter. DCT scaling is a box-like reduction, not Pillow's
     * antialiased bilinear, so the nearer the scaled crop is to the output
     * size the more the result differs from torchvision's (README "Decode
     * figures" gives the measured differences); 8 always decodes at full
     * scale. */
    float dct_margin;

    /* The augmentations of torchvision's classification recipes, train
     * transform only, all drawn from the sample's own random stream (so
     * batches stay bit-identical whatever the threads or hosts):
     * auto_augment (default none) runs on the resized crop, in uint8,
     * before the conversion to dtype; the geometric ops sample with
     * augment_interpolation (default nearest, torchvision's default; the
     * reference recipe uses bilinear) and fill with 0. random_erase
     * (default 0) is RandomErasing(p=random_erase, value=0) after
     * normalization: 0 in float outputs, round(255 * mean) in uint8
     * (random_erase_value below gives value="random").
     * augment_magnitude_bins (2 to 1000; default 0: 31) is the bin count
     * of TrivialAugmentWide and RandAugment; ra_num_ops (1 to 16; default
     * 0: 2) and ra_magnitude (1 to below the bin count; default 0: 9)
     * RandAugment's. (0 stands for the default so that options of an
     * older header, zero past their size, get torchvision's values; bin 0
     * would make every RandAugment op an identity.) */
    /* A preset (default none): each option of the recipe that is still at
     * its default (0, none, nearest) takes the recipe's value when the
     * loader is created; options set explicitly keep theirs. */
    enum stk_recipe recipe;
    /* Eval transform: the short side is resized to eval_resize before the
     * center crop (default 0: int(min(height, width) / 0.875)). */
    unsigned eval_resize;
    /* Repeated augmentation (the reference's --ra-sampler --ra-reps;
     * default 0: 1, off): each sample is seen ra_reps times per epoch, each
     * copy with its own crop and augmentations, the copies dealt round
     * robin over the ranks as torchvision's RASampler deals them: on
     * ra_reps different ranks when world_size >= ra_reps, else spread over
     * all ranks as evenly as they go. Any pair works. Where ra_reps divides
     * world_size, ranks rank / ra_reps * ra_reps ... + ra_reps - 1 read the
     * same samples in the same order; else the epoch is split into
     * world_size / gcd(ra_reps, world_size) parts and each rank reads
     * ra_reps / gcd of them, one per copy it holds. With a dataset index
     * each rank still yields total / world_size samples (as the
     * reference's sampler), rounded down to a multiple of the parts it
     * reads, the same count of each, so an epoch covers 1 / ra_reps of the
     * data, a different part each epoch when shuffling; without one and
     * without samples_per_rank a rank yields its parts whole (samples_per_rank
     * without an index then cuts the rank's stream, and the last samples'
     * copies may not all be delivered). node_affinity needs ra_reps to
     * divide the ranks per node. */
    unsigned ra_reps;
    enum stk_auto_augment auto_augment;
    enum stk_interpolation augment_interpolation;
    unsigned augment_magnitude_bins;
    unsigned ra_num_ops;
    unsigned ra_magnitude;
    float random_erase;
    /* After auto_augment, in this order (all train only, default 0: off):
     * ColorJitter(brightness=contrast=saturation=color_jitter,
     * hue=hue_jitter) with torchvision's random order of the four,
     * RandomGrayscale(grayscale_probability), GaussianBlur(blur_kernel,
     * sigma=(blur_sigma_min, blur_sigma_max)) (kernel odd, at most 63;
     * sigma 0: 0.1 and 2.0). */
    float color_jitter;
    float hue_jitter;
    float grayscale_probability;
    unsigned blur_kernel;
    float blur_sigma_min;
    float blur_sigma_max;

    /* Mixup and CutMix of whole batches (default 0: off), as the
     * classification reference's RandomMixup/RandomCutmix behind
     * RandomChoice: each batch is mixed with itself rolled by one sample,
     * with weight lambda ~ Beta(alpha, alpha) for its own image. With both
     * alphas set, a batch gets CutMix with probability
     * mix_switch_probability (default 0: 0.5, as RandomChoice), else Mixup. The draws are keyed
     * by (seed, epoch, rank, batch index). stk_batch.mix_labels and
     * mix_weight say what each image holds. Image dtype uint8, float32 or
     * bfloat16. */
    float mixup_alpha;
    float cutmix_alpha;
    float mix_switch_probability;
    /* Read by the Python Loader only: with mixing, yield soft one-hot
     * targets of num_classes classes (default 0: the label pairs). */
    unsigned num_classes;
    /* 0 (default): with several ranks every rank yields the same number of
     * samples when the loader can know it (a dataset index gives each rank
     * ceil(total / world_size), see whole_shards).
     * 1, for evaluation: each rank yields every sample of its own shards
     * once and no other, so the ranks together deliver every sample of
     * the dataset exactly once; ranks then yield uneven numbers of batches
     * (no gradient is synchronised in evaluation). samples_per_rank asks
     * for equal shares and is refused with it. */
    int uneven;
    /* The filter resizing the crop, train and eval (the reference's
     * --interpolation): bilinear (default) or bicubic, each bit-exact with
     * Pillow's antialiased filter (BICUBIC: Keys' cubic, a = -0.5), which
     * is what torchvision 0.14 runs on the PIL images of the reference's
     * default backend. (torchvision's tensor path differs: no antialiasing
     * unless asked, and its own float bicubic.) */
    enum stk_resize_interpolation interpolation;
    /* RandomErasing's value (default zero: value=0, see random_erase).
     * STK_ERASE_RANDOM is value="random": torchvision draws a standard
     * normal number per erased element of the normalized image, so float
     * outputs get that number (rounded to the dtype) and uint8 outputs,
     * which are not normalized, the level it stands for:
     * round(255 * (mean + std * z)) clamped to 0..255. The numbers come
     * from the sample's own stream, after its box. */
    enum stk_erase_value random_erase_value;
    /* 0 (default): with a dataset index and several ranks, each rank reads
     * a contiguous run of the epoch's samples cut out of its shards in
     * their permuted order, so the ranks together read every sample once
     * per epoch, as torch's DistributedSampler does: with equal shares each
     * rank yields ceil(total / world_size) samples, the last ranks
     * repeating at most world_size - 1 in all (stk_stats.samples_padded);
     * with uneven none is repeated and fewer shards than ranks is fine. A
     * shard may be read in part by two ranks. 1: each rank reads whole
     * shards, as without an index; their counts then differ, and equal
     * shares leave some samples out and read others twice. Refused without
     * index_path. */
    int whole_shards;
    /* 0 (default): with a dataset index over local, uncompressed shards and
     * shuffle on, each epoch reads its samples in a seeded global random
     * order, each opened at the offset the index records: batches mix like
     * a uniform permutation however the shards were written (sorted by
     * class included), with no shuffle window. The ranks split that order
     * as whole_shards=0 says. 1, a shuffle_buffer other than its default,
     * remote or compressed shards, or no index: the sliding window over
     * streamed shards. Refused without index_path and shuffle. */
    int window_shuffle;
    /* 1: each shard stays on one node for the whole run, so that a node
     * cache (cache_dir) holding the node's share serves every epoch after
     * the first. The shards are dealt to the nodes once per run (by seed,
     * balancing their samples), and each epoch a node's ranks split its own
     * shards in the epoch's order, by shard or (with an index) by sample,
     * every rank still yielding ceil(total / world_size) samples. Mixing
     * in batches is unchanged (docs/node-cache.md); the epoch's sample
     * order differs from node_affinity=0's, so a saved state resumes only
     * under the same setting. Ranks must be numbered node by node (torchrun,
     * Slurm's block distribution). 0: every epoch splits all shards over
     * all ranks anew. -1 (default): 1 where it pays, with a cache_dir and
     * more ranks than the launcher's ranks per node (ranks_per_node); else
     * 0. */
    int node_affinity;
    /* Ranks per node under node_affinity; 0 (default): the launcher's
     * LOCAL_WORLD_SIZE, SLURM_NTASKS_PER_NODE, or SLURM_NTASKS /
     * SLURM_NNODES. Must divide world_size. */
    int ranks_per_node;
    /* Epochs the caller reads, from epoch on; 0 (default): as many as it
     * asks for. At an epoch boundary the loader reads the next epoch's
     * shuffle window ahead while the last epoch's tail is delivered, so
     * that its first batch does not wait for it (at most one window,
     * within shuffle_buffer_bytes, dropped if the caller then goes
     * elsewhere): none is read past these epochs. Speed only: the batches
     * are the same. */
    unsigned epochs;
    /* 1: an epoch's first batches wait for the shuffle window, read in
     * storage order. 0 (default): where the shards are local and
     * uncompressed and their samples' offsets known (index_path, or else a
     * scan of their tar headers), the samples of the first batches, known
     * from positions alone, are read at their offsets while the window
     * fills, so that the first batch waits for its own samples, not for the
     * window's (docs/performance.md). For a disk where a seek costs more
     * than reading the window. Speed only: the batches are the same. */
    int sequential_start;
};

/* Fill *opts with the defaults documented above (and struct_size). Call it
 * as stk_options_init(&opts): the macro passes the caller's struct size. */
STK_API void stk_options_init_sized(struct stk_options *opts, size_t size);
#define stk_options_init(opts) stk_options_init_sized((opts), sizeof(struct stk_options))

/*
 * Options by name. Every field of struct stk_options but the callbacks
 * (log, alloc_batch_memory, ...) has one entry in a table inside the
 * library, which the stoker command's flags and --help, the Python keyword
 * arguments and help(stoker.Loader) are all made from.
 */
enum stk_option_type {
    STK_OPTION_BOOL = 0,    /* "0" or "1" (an int field) */
    STK_OPTION_INTEGER = 1, /* decimal, within [min, max] or the default */
    STK_OPTION_FLOAT = 2,   /* a number or a fraction such as "3/4" */
    STK_OPTION_FLOAT3 = 3,  /* three of them separated by commas */
    STK_OPTION_CHOICE = 4,  /* one of the comma-separated names in metavar; the
                               enum value is its position */
    STK_OPTION_STRING = 5   /* the pointer is stored, not copied (NULL: none) */
};
enum stk_option_flags {
    STK_OPTION_BYTES = 1,         /* a byte count: K, M, G, T (binary) suffixes too */
    STK_OPTION_SPEED_ONLY = 8,    /* changes speed or limits, never which batches come */
    /* The commands of the stoker program that take it as --cli_name, one
     * bit each (4 is no longer used). */
    STK_OPTION_CLI_BENCH = 2,     /* stoker bench */
    STK_OPTION_CLI_LS = 16,       /* stoker ls */
    STK_OPTION_CLI_CAT = 32,      /* stoker cat */
    STK_OPTION_CLI_INDEX = 64,    /* stoker index */
    STK_OPTION_CLI_VERIFY = 128,  /* stoker verify */
    STK_OPTION_CLI_RESHARD = 256, /* stoker reshard */
    /* Every command that reads shards: an option whose flags hold all of
     * these bits is one of the shard-reading options they all share. */
    STK_OPTION_CLI_SOURCE = STK_OPTION_CLI_BENCH | STK_OPTION_CLI_LS | STK_OPTION_CLI_CAT |
                            STK_OPTION_CLI_INDEX | STK_OPTION_CLI_VERIFY | STK_OPTION_CLI_RESHARD
};
struct stk_option_info {
    const char *name;          /* the field's name, e.g. "batch_size" */
    enum stk_option_type type;
    unsigned flags;            /* enum stk_option_flags */
    const char *default_value; /* as stk_options_set() takes it; NULL: none */
    int64_t min;               /* STK_OPTION_INTEGER: accepted range; the default */
    uint64_t max;              /* is accepted too (-1: auto, 0: none) */
    const char *cli_name;      /* flag of the stoker command without "--" (a BOOL
                                  defaulting to 1 is --no-NAME), or NULL */
    const char *metavar;       /* placeholder in help; the names of a CHOICE */
    const char *doc;           /* what it means, one line */
};

/* The i-th option (0, 1, ...), NULL past the last; or the one called name,
 * NULL if none. The entries are static: never freed, never changed. */
STK_API const struct stk_option_info *stk_option_at(size_t i);
STK_API const struct stk_option_info *stk_option_find(const char *name);

/* What option o accepts, in words ("between 1 and 1024", "one of
 * fail,skip", ...), into buf (size bytes, always NUL-terminated when size >
 * 0); the length of the whole text, as snprintf returns. o must come from
 * stk_option_at() or stk_option_find(). */
STK_API size_t stk_option_describe(const struct stk_option_info *o, char *buf, size_t size);

/* What option o needs to act, in words ("transform=train", "cache_dir"),
 * or NULL when it acts on its own. stk_loader_create() refuses a value
 * other than the default where that does not hold (STK_EINVAL naming
 * both), rather than ignore it. Static text; o as for stk_option_describe. */
STK_API const char *stk_option_needs(const struct stk_option_info *o);

/*
 * Read a count as the option table reads its unsigned options: decimal
 * digits (no sign, no blanks) and, where bytes is nonzero, a binary K, M, G
 * or T suffix (KiB and KB alike): "4G" is 4 << 30. Returns 0 with the value
 * in *out, or STK_EINVAL (and *out unchanged) when text is no such number
 * or the value does not fit 64 bits. The one reader of sizes such as "4G":
 * the stoker command's own (--max-size) and Python's use it too.
 */
STK_API int stk_parse_count(const char *text, int bytes, uint64_t *out);

/*
 * Set option `name` of opts from text, as stk_option_info describes it. A
 * value that is no such number, that is out of range, or does not fit the
 * field's C type changes nothing and returns STK_EINVAL with a message
 * naming the option, the value and what it accepts in errbuf (errbuf_size
 * bytes including the NUL; NULL allowed), as does an unknown name. A
 * STRING option stores value itself (not a copy; NULL resets it): it must
 * stay valid as long as the field's documentation above says. opts must
 * come from stk_options_init(); an option past its struct_size (a program
 * built against an older stoker.h) is STK_EINVAL too.
 */
STK_API int stk_options_set(struct stk_options *opts, const char *name, const char *value,
                            char *errbuf, size_t errbuf_size);

/* ---- Loader ------------------------------------------------------------ */

/* Defined in the sections below. */
struct stk_batch;
struct stk_stats;

typedef struct stk_loader stk_loader;

/*
 * Create a loader over a dataset.
 *
 * urls: n_urls patterns, each a path, a file://, http(s)://, s3:// or gs://
 * URL, pipe:COMMAND, or "@FILE" naming a text file with one pattern per
 * line (blank lines and '#' comments ignored). Patterns are brace-expanded:
 * "train-{000000..000127}.tar", "{a,b}". An s3:// or gs:// URL ending in
 * '/' is a prefix: it is listed here (ListObjectsV2, every page) and
 * replaced by the sorted shards (.tar, .tgz, .tar.gz/.bz2/.xz/.zst/.lz4)
 * under it; a listing that fails or finds no shard fails the call, the
 * message naming the prefix. The strings are copied; the caller keeps
 * ownership.
 *
 * The loader keeps a copy of *opts and of every string it points to, so
 * they need only outlive this call.
 *
 * Apart from prefix listings, nothing is read until the first
 * stk_loader_next() or stk_loader_start(). On failure *out is
 * NULL and the return code says why; a detailed message for errors found
 * while planning (bad pattern, too few shards) is copied into errbuf when
 * errbuf is not NULL (errbuf_size bytes including the NUL).
 */
STK_API int stk_loader_create(const struct stk_options *opts, const char *const *urls, size_t n_urls,
                              stk_loader **out, char *errbuf, size_t errbuf_size);

/*
 * Deliver the next batch of the current epoch. On success *out points to a
 * batch owned by the loader until stk_batch_release(). Returns STK_EOF when
 * the epoch is over (then *out is NULL), STK_EBUSY when the caller already
 * holds max_batches batches, or another error (see stk_loader_errmsg()).
 * After an error other than STK_EBUSY or STK_EINTR the epoch cannot
 * continue; call stk_loader_set_epoch() to start again. Blocks until a
 * batch is ready, or until stk_loader_interrupt() (then STK_EINTR).
 */
STK_API int stk_loader_next(stk_loader *loader, struct stk_batch **out);

/*
 * stk_loader_next() that waits at most timeout_ms milliseconds for a batch
 * (0: as long as it takes), then returns STK_EINTR as an interrupt does:
 * nothing is lost, the epoch goes on, and the next call delivers the batch
 * this one would have. For a caller that must look at something else while
 * it waits: the Python extension waits in slices of 100 ms and checks for
 * Ctrl-C between them. Time spent starting an epoch (opening an index,
 * starting threads) is not bounded by it.
 */
STK_API int stk_loader_next_timed(stk_loader *loader, struct stk_batch **out,
                                  unsigned timeout_ms);

/*
 * Start reading the batches the next stk_loader_next() delivers (the
 * position of the last stk_loader_seek(), stk_loader_seek_range() or
 * stk_loader_set_epoch(), else epoch `epoch` of the options from batch 0)
 * without waiting for one: the epoch's reader, sequencer and image threads
 * begin now, so a caller with other work to do first (building a model,
 * loading a checkpoint, evaluating between epochs) finds its first batch
 * ready, or nearer (Grain's start_prefetch). Returns 0 when the epoch is
 * started (also when it already was), or the error that starting it met,
 * which stk_loader_next() then returns too. Same threading rules as
 * stk_loader_next().
 */
STK_API int stk_loader_start(stk_loader *loader);

/*
 * Make stk_loader_next() return STK_EINTR (and no batch) instead of
 * waiting: a call waiting for a batch on another thread returns at once;
 * if none is waiting, the next call returns STK_EINTR without waiting (a
 * call that finds its batch ready may deliver it and leave the interrupt
 * to the following call). Interrupts do not add up: any number of them
 * before a call ends ends one call. Nothing is lost: the epoch goes on,
 * and the next stk_loader_next() delivers the batch the interrupted call
 * would have.
 *
 * The one loader function that may be called from any thread while
 * another thread is inside a call on the same loader (not from a signal
 * handler: it takes a mutex); valid from stk_loader_create() until
 * stk_loader_destroy() begins. To stop a loader that a thread may be
 * blocked in (a slow source, a pipe: command that writes nothing), call
 * this, wait until that thread has left stk_loader_next(), then call
 * stk_loader_set_epoch() or stk_loader_destroy() (never concurrently with
 * another call).
 */
STK_API void stk_loader_interrupt(stk_loader *loader);

/*
 * Stop the current epoch (if any, also mid-epoch: its threads are joined
 * and unread data dropped) and make the next stk_loader_next() start epoch
 * `epoch`. Batches the caller holds stay valid until released.
 */
STK_API int stk_loader_set_epoch(stk_loader *loader, uint64_t epoch);

/*
 * Stop the current epoch and make the next stk_loader_next() deliver batch
 * `batch` of epoch `epoch`: exactly the batch an uninterrupted run would
 * deliver there (resume after a restart). With a dataset index the readers
 * jump to the oldest sample the shuffle holds at that batch and open their
 * shards at the byte offset of their first sample (reading up to it only in
 * compressed shards), so at most 2 * shuffle_buffer samples are read
 * again; without one the samples of the batches before it are read
 * again and dropped. Either way nothing before it is decoded.
 */
STK_API int stk_loader_seek(stk_loader *loader, uint64_t epoch, uint64_t batch);

/*
 * Like stk_loader_seek(), for a range of n_batches batches: the next
 * stk_loader_next() calls deliver batches first_batch .. first_batch +
 * n_batches - 1 of epoch `epoch` (fewer where the epoch ends) and then
 * STK_EOF, and nothing after the range is decoded (samples may be read
 * ahead). n_batches 0 means up to the end of the epoch. When the loader
 * has just delivered the batch before first_batch of the same epoch,
 * through an earlier range, the range continues that epoch's readers and
 * threads: nothing is read again and no thread is started. Every batch
 * holds exactly what an uninterrupted run delivers at its index, so ranges
 * of one epoch can be made by different loaders (processes, hosts) and put
 * together; with a dataset index each restart reads at most one shuffle
 * window again.
 */
STK_API int stk_loader_seek_range(stk_loader *loader, uint64_t epoch, uint64_t first_batch,
                                  uint64_t n_batches);

/*
 * Elastic resume: continue an epoch that ranks of another world size
 * interrupted. With a dataset index each epoch is one sequence of the
 * index's N samples (its shards in the epoch's order, or the global order)
 * that the ranks split into equal contiguous runs, each rank delivering its
 * run front to back (a global order, or no shuffle) or through its shuffle
 * window, whose order is a function of the seed, the window and the
 * index's counts alone; so what the old ranks delivered follows from how
 * many samples each delivered. stk_loader_remainder() turns those counts
 * (delivered[r] for old rank r of old_world in epoch `epoch`: batches times
 * batch size is enough, a count past the rank's share counts as its share)
 * into the positions of the sequence that no rank delivered: pairs [begin,
 * end) in out (capacity pairs), their number in *n_out. Front to back,
 * ranges + 2 * old_world + 1 always suffice; under a window the samples it
 * held make more (about shuffle_buffer / 4 per old rank, at most
 * shards_in_flight + 2 * shuffle_buffer + 3 per old rank besides): on
 * STK_ELIMIT *n_out says how many, call again with that room.
 * ranges/n_ranges: the positions the old ranks were splitting when they
 * themselves ran an epoch so resumed (NULL: the whole sequence). The old
 * ranks ran with this loader's options (threads aside) and order: under
 * the window, its replay uses this loader's shuffle_buffer and
 * shards_in_flight. old_ranks_per_node: the old run's node affinity (0:
 * off, stk_loader_ranks_per_node()); under it each old node split a
 * sequence of its own shards, and the positions out are then of the
 * concatenation of the old nodes' sequences (node 0's first), each old
 * node's tail that its ranks' shares left out included (ranges NULL only:
 * a resumed epoch is split over all ranks; not under a shuffle window:
 * refused). stk_loader_set_remainder() then makes epoch `epoch` of this
 * loader deliver only those positions, split over this loader's ranks as
 * a whole epoch is split (equal shares of ceil(R / world_size), padding
 * counted in samples_padded; uneven: each once; without node affinity,
 * which applies again from the next epoch), each sample with the
 * augmentation it has at any world size; other epochs are as ever. nodes:
 * the old run's node count (old_world / old_ranks_per_node) when the
 * ranges came from a run under node affinity, else 1; it names the
 * sequence the positions are of, and travels with the ranges through
 * later resumes. It
 * stops the epoch in flight unless the same ranges were set already;
 * ranges NULL clears them (n_ranges 0 with ranges not NULL: nothing is
 * left). Both refuse with STK_EINVAL (the message says why) a loader whose
 * delivered samples do not follow from counts: no index, a window over
 * compressed shards (no sample offsets), whole_shards, ra_reps, or
 * samples_per_rank given; and ranges that are not ascending, disjoint and
 * within the index's samples.
 */
STK_API int stk_loader_remainder(stk_loader *loader, uint64_t epoch, int old_world,
                                 int old_ranks_per_node, const uint64_t *delivered,
                                 const uint64_t *ranges, size_t n_ranges, uint64_t *out,
                                 size_t capacity, size_t *n_out);
STK_API int stk_loader_set_remainder(stk_loader *loader, uint64_t epoch, int nodes,
                                     const uint64_t *ranges, size_t n_ranges);

/* Samples this rank yields in the current epoch when known
 * (samples_per_rank, or the rank's shards per the dataset index), else 0. */
STK_API uint64_t stk_loader_epoch_samples(const stk_loader *loader);

/* Number of shards in the expanded URL list, and this loader's rank/world. */
STK_API size_t stk_loader_num_shards(const stk_loader *loader);
STK_API int stk_loader_rank(const stk_loader *loader);
STK_API int stk_loader_world_size(const stk_loader *loader);

/* The ranks per node under node affinity as this loader resolved it (from
 * node_affinity, ranks_per_node and the launcher's environment), 0 when
 * off: what another process must be given (node_affinity=1 and this
 * ranks_per_node, or node_affinity=0) to plan the same epochs elsewhere. */
STK_API int stk_loader_ranks_per_node(const stk_loader *loader);

/* 1 when this loader reads each epoch in a global order of the samples
 * (docs/shuffle.md: an index over local shards, or over remote ones with a
 * node cache that holds the node's shards), 0 when through the shuffle
 * window. Decided at creation from the options and the index alone; two
 * loaders whose choices differ give different batches, so a saved state
 * belongs to one of them. */
STK_API int stk_loader_global_order(const stk_loader *loader);

/* Detailed message of the last failed call on this loader ("" if none).
 * Valid until the next call on the loader. */
STK_API const char *stk_loader_errmsg(const stk_loader *loader);

/* Stop all threads and free everything. Batches still held by the caller
 * must be released before this call. NULL is a no-op. */
STK_API void stk_loader_destroy(stk_loader *loader);

/* ---- Batches ----------------------------------------------------------- */

/* One member of a sample: "KEY.EXT" -> ext, bytes. */
struct stk_member {
    const char *ext;     /* extension after the first dot, lower-cased, NUL-terminated */
    const uint8_t *data; /* member bytes (a NUL follows them, not counted in size) */
    size_t size;
};

/* One sample: the members of one shard that share a key. */
struct stk_sample {
    const char *key;   /* WebDataset __key__: member path up to the first dot of its basename */
    const char *url;   /* WebDataset __url__: the shard it came from */
    uint64_t shard_index; /* index of that shard in the expanded URL list */
    size_t n_members;
    const struct stk_member *members;
};

/* A batch. All pointers inside stay valid until stk_batch_release(). */
struct stk_batch {
    uint64_t index;     /* 0-based batch number within the epoch */
    size_t n_samples;   /* batch_size, or fewer for the last batch */
    const struct stk_sample *samples;
    /* With a transform: n_samples images, contiguous, in the options'
     * dtype and layout, and one label per image; NULL otherwise. Under
     * STK_ON_ERROR_SKIP a sample whose image, label or required member is
     * bad is replaced by the batch's first good sample as a whole: its
     * image, its label and its entry in samples (key, url, members), so the
     * image and the other members of one slot always come from one sample;
     * images_replaced counts such slots. */
    void *images;
    size_t image_bytes;       /* bytes of one image */
    const int64_t *labels;
    /* Bad input (STK_ON_ERROR_SKIP) this batch accounts for. Every skip is
     * charged to one place in the sample sequence: bad samples to the next
     * good sample of their shard, or, after a shard's last good sample,
     * with a shard that fails, to the sample taken just before that shard's
     * end. So the counts of a batch are the same whichever process made it
     * (stk_loader_seek_range), and summed over an epoch they count each
     * skip once (the skips charged to samples that drop_last drops excepted).
     * samples_skipped includes images_replaced. */
    uint64_t samples_skipped;
    uint64_t images_replaced;
    uint64_t shards_failed;
    /* Mixup/CutMix (stk_options.mixup_alpha, cutmix_alpha): image i holds
     * mix_weight of its own label's image and 1 - mix_weight of the image
     * labelled mix_labels[i] (the previous image of the batch, the last
     * for image 0), so its soft target is mix_weight * onehot(labels[i]) +
     * (1 - mix_weight) * onehot(mix_labels[i]). NULL and 1 without
     * mixing. */
    const int64_t *mix_labels;
    double mix_weight;
    /* n_samples keys, one per sample: the key of the sample's random
     * stream, a hash of its identity (seed, epoch, shard, pass over the
     * rank's shards, position among the shard's good samples), from which
     * the train transform draws its crop, flip and augmentations. The same
     * whichever thread or process made the batch, with any transform
     * (STK_TRANSFORM_NONE included), so code that augments samples itself
     * can draw from it and stay reproducible (the Python Loader's map=
     * hooks do). A slot replaced under STK_ON_ERROR_SKIP has its
     * replacement's key. */
    const uint64_t *sample_keys;
};

/* Give a batch back. May be called from any thread, in any order, also after
 * stk_loader_set_epoch(), but not after stk_loader_destroy(). NULL is a no-op. */
STK_API void stk_batch_release(struct stk_batch *batch);

/* ---- Statistics and the input-bound report ----------------------------- */

/* Counters, cumulative over the loader's lifetime. */
struct stk_stats {
    uint64_t shards_opened;
    uint64_t shards_failed;   /* shards cut short by an error under STK_ON_ERROR_SKIP
                                 (data after the end-of-archive marker included) */
    uint64_t shards_empty;    /* shards read to their end without a sample: no
                                 members, or every member ignored */
    uint64_t samples;         /* samples delivered in batches */
    uint64_t samples_skipped; /* bad samples skipped under STK_ON_ERROR_SKIP */
    uint64_t members_ignored; /* directories, links and members without a key */
    uint64_t batches;
    uint64_t bytes_read;      /* bytes read from shard sources (compressed size) */
    uint64_t member_bytes;    /* bytes of member data delivered */
    uint64_t images_decoded;
    uint64_t images_replaced; /* bad images replaced by a copy of another image of
                                 their batch under STK_ON_ERROR_SKIP (also counted
                                 in samples_skipped) */
    uint64_t decode_ns;       /* time spent decoding and transforming, all threads */
    uint64_t samples_read;    /* samples read from shards, also those dropped by a
                                 resume; not those counted below */
    uint64_t samples_passed_over; /* samples a resume read (never decoded) to reach
                                 its start inside a shard the index could not
                                 locate it in (a compressed shard) */
    /* Node cache (stk_options.cache_dir), this loader's own share: */
    uint64_t cache_hits;          /* shards read from a complete cached copy */
    uint64_t cache_misses;        /* shards this loader downloaded into the cache */
    uint64_t cache_evictions;     /* shards this loader evicted to make room */
    uint64_t cache_bytes_written; /* bytes this loader wrote into the cache */
    uint64_t retries;         /* remote requests repeated after a transient failure */
    uint64_t resumes;         /* of which continued a shard from a byte offset */
    /* Where time goes, summed over threads (ns). decode_ns above is
     * image_decode_ns + image_resample_ns + image_convert_ns plus labels and
     * crop sampling. */
    uint64_t read_ns;           /* reader threads opening, fetching, decompressing
                                   and parsing shards (waits on the network
                                   included; not waits for a free buffer) */
    uint64_t image_decode_ns;   /* JPEG/PNG decoding (libjpeg-turbo, libspng) */
    uint64_t image_resample_ns; /* antialiased resize of the crop, and the
                                   conversion to the batch's dtype and layout
                                   where it runs in the resize's last pass
                                   (nothing between them: the usual case) */
    uint64_t image_convert_ns;  /* layout and dtype conversion, normalization,
                                   where it is a pass of its own (eval crops
                                   with padding) */
    uint64_t wait_ns;           /* callers blocked in stk_loader_next(): when this
                                   is a large share of a training step, the run
                                   is input-bound */
    uint64_t sequence_ns;       /* CPU time of the thread that interleaves,
                                   shuffles and assembles batches */
    uint64_t wall_ns;           /* since the loader's first stk_loader_next() */
    uint64_t read_threads;      /* reader threads of the current or last epoch */
    uint64_t decode_threads;    /* image threads (0 without a transform) */
    /* Shuffle quality: how many shards a batch mixes. For a batch of b
     * samples, n_s of them from shard s, the batches delivered so far add
     * b(b-1) to shuffle_pairs and n_s(n_s-1) to shuffle_shard_pairs; their
     * ratio is k_eff, the effective number of shards per batch (see
     * stk_stats_rates()). The shards the loader took whole give their
     * sample counts m: shuffle_shards_sized of them, summing m to
     * shuffle_sized_samples and m(m-1) to shuffle_sized_pairs; with
     * shuffle_epoch_shards, the shards of this rank's epoch, they give the
     * k_eff of a perfect shuffle of the epoch. */
    uint64_t shuffle_pairs;
    uint64_t shuffle_shard_pairs;
    uint64_t shuffle_shards_sized;
    uint64_t shuffle_sized_samples;
    uint64_t shuffle_sized_pairs;
    uint64_t shuffle_epoch_shards;
    /* The recipe's augmentations (stk_options.auto_augment, random_erase,
     * mixup_alpha, cutmix_alpha), summed over threads (ns): */
    uint64_t image_augment_ns;  /* auto_augment, ColorJitter, grayscale, blur on the crops */
    uint64_t image_erase_ns;    /* random erasing */
    uint64_t batch_mix_ns;      /* Mixup and CutMix of whole batches */
    /* Label mixing, the same way, over the batches delivered with labels
     * (a transform): label_pairs sums b(b-1), label_same_pairs n_c(n_c-1)
     * for n_c samples of label c in a batch, label_distinct the distinct
     * labels of each of the label_batches batches; label_samples (N) and
     * label_sample_pairs (sum N_c(N_c-1) over the labels seen so far) give
     * what a uniform permutation would mix. */
    uint64_t label_pairs;
    uint64_t label_same_pairs;
    uint64_t label_distinct;
    uint64_t label_batches;
    uint64_t label_samples;
    uint64_t label_sample_pairs;
    /* Each augmentation operation on the crops: its time summed over
     * threads (ns) and how many times it ran, so its cost per run is
     * aug_NAME_ns / aug_NAME_runs and per image aug_NAME_ns /
     * images_decoded. auto_augment's ops and ColorJitter's (brightness,
     * contrast, color: saturation, hue) count under one name. */
    uint64_t aug_shear_x_ns, aug_shear_x_runs;
    uint64_t aug_shear_y_ns, aug_shear_y_runs;
    uint64_t aug_translate_x_ns, aug_translate_x_runs;
    uint64_t aug_translate_y_ns, aug_translate_y_runs;
    uint64_t aug_rotate_ns, aug_rotate_runs;
    uint64_t aug_brightness_ns, aug_brightness_runs;
    uint64_t aug_color_ns, aug_color_runs;
    uint64_t aug_contrast_ns, aug_contrast_runs;
    uint64_t aug_sharpness_ns, aug_sharpness_runs;
    uint64_t aug_posterize_ns, aug_posterize_runs;
    uint64_t aug_solarize_ns, aug_solarize_runs;
    uint64_t aug_autocontrast_ns, aug_autocontrast_runs;
    uint64_t aug_equalize_ns, aug_equalize_runs;
    uint64_t aug_invert_ns, aug_invert_runs;
    uint64_t aug_hue_ns, aug_hue_runs;
    uint64_t aug_grayscale_ns, aug_grayscale_runs;
    uint64_t aug_blur_ns, aug_blur_runs;
    /* With a dataset index and several ranks (split by sample): the
     * samples of this rank's current epoch that repeat others of the epoch
     * so that every rank yields ceil(total / world) of them, as
     * DistributedSampler pads (world - 1 at most over all ranks; 0 with
     * uneven). */
    uint64_t samples_padded;
    /* Temporary cloud credentials this loader's reads fetched: a token
     * endpoint, metadata server or STS asked (the first time, and before
     * each expiry). The credentials are shared by the whole process, so
     * another loader's fetch may serve this one. */
    uint64_t cred_refreshes;
    /* The node cache in the current epoch (since the last epoch start,
     * seek or set_epoch): cache_hits, cache_misses and cache_bytes_written
     * (the bytes fetched from the origin) of this loader. With
     * node_affinity and a cache holding the node's share, the misses and
     * origin bytes fall to about zero after the first epoch
     * (docs/node-cache.md). */
    uint64_t cache_epoch_hits;
    uint64_t cache_epoch_misses;
    uint64_t cache_epoch_origin_bytes;
    /* Samples an epoch read before the loop asked for it: the next epoch's
     * readers fill its shuffle window while the last epoch's tail is
     * delivered (docs/performance.md), so that its first batch does not
     * wait for the window. Counted in samples_read and bytes_read too, when
     * read. */
    uint64_t samples_read_ahead;
    /* Samples of an epoch's first batches read at their offsets while its
     * shuffle window filled, and delivered from there (sequential_start):
     * the stream reads them too, and drops them. */
    uint64_t samples_fast_start;
};

/* Where requests to an s3:// or gs:// url would get their credentials, in
 * words ("metadata server http://...", "$AWS_ACCESS_KEY_ID", "no
 * credentials (tried ...)"), never a secret: NUL-terminated into buf (cap
 * bytes, truncated to fit). Temporary credentials are fetched (and cached
 * for the process) as a read would. 0; STK_EINVAL for another scheme; or
 * the source's error, its message in buf. Thread-safe while no thread
 * changes the environment. */
STK_API int stk_cloud_credentials_source(const char *url, char *buf, size_t cap);

/* Copy the counters. Safe to call while batches are in flight, from any
 * thread, also while another thread is inside a call on the loader. */
STK_API void stk_loader_stats_sized(const stk_loader *loader, struct stk_stats *stats,
                                    size_t stats_size);
#define stk_loader_stats(loader, stats)                                                        \
    stk_loader_stats_sized((loader), (stats), sizeof(struct stk_stats))

/* What a field of struct stk_stats is: a count of events (only grows),
 * time summed over threads in nanoseconds (only grows), or a gauge (a
 * current value, such as a thread count, that may go down). */
enum stk_stat_kind { STK_STAT_COUNT = 0, STK_STAT_NS = 1, STK_STAT_GAUGE = 2 };

/* The fields of struct stk_stats by name (every one a uint64_t at offset
 * bytes into the struct), in order: the i-th (0, 1, ...), NULL past the
 * last. What Python's stats() keys, its Prometheus metrics and `stoker
 * bench --json` are made of. */
struct stk_stats_field {
    const char *name;
    size_t offset;
    const char *doc;
    enum stk_stat_kind kind; /* appended: older callers never read it */
};
STK_API const struct stk_stats_field *stk_stats_field_at(size_t i);

/*
 * Write a plain-text report of where the time in stats went into buf (size
 * bytes, always NUL-terminated when size > 0): whether the caller was
 * input-bound (it waited for batches 5% of its time or more), which stage
 * kept its threads busiest (reading or image decoding, with the time per
 * item of each part), and what would help. A few lines, each ending in a
 * newline. Returns the length of the whole report, as snprintf does.
 */
STK_API size_t stk_stats_report_sized(const struct stk_stats *stats, size_t stats_size, char *buf,
                                      size_t size);
#define stk_stats_report(stats, buf, size)                                                     \
    stk_stats_report_sized((stats), sizeof(struct stk_stats), (buf), (size))

/* What the counters say over an interval (see stk_stats_rates()). */
struct stk_rates {
    double seconds;            /* wall time of the interval */
    double samples_per_s;      /* samples delivered */
    double images_per_s;       /* images decoded */
    double read_bytes_per_s;   /* bytes read from shard sources */
    double wait_share;         /* share of the interval callers waited in stk_loader_next() */
    double read_busy;          /* busy share of the reader threads (0..1; work is
                                  counted when a piece of it ends, so over
                                  intervals of a few pieces it is rough) */
    double decode_busy;        /* busy share of the image threads (0 without a transform) */
    double batching_busy;      /* busy share of the thread that interleaves, shuffles and
                                  assembles batches */
    /* Shards mixed per batch, k_eff = sum b(b-1) / sum n_s(n_s-1) over the
     * interval's batches (0 without a batch of two samples or more;
     * INFINITY when no two samples of a batch came from one shard), and
     * its expected value for a perfect shuffle of the epoch,
     * k_perfect = N(N-1) / sum m_s(m_s-1) for the epoch's N samples in
     * shards of m_s, estimated from the shards taken whole so far
     * (shuffle_epoch_shards shards of their mean size; 0 before the first
     * one ends). */
    double shuffle_k_eff;
    double shuffle_k_perfect;
    /* Labels mixed per batch, the same ratio over labels (L_eff; INFINITY
     * when no two samples of a batch shared a label), its value for a
     * uniform permutation of the labels seen since the start (not the
     * interval: it needs many batches), and the mean distinct labels per
     * batch over the interval. 0 without labels. */
    double label_mix_eff;
    double label_mix_perfect;
    double labels_per_batch;
};

/*
 * Rates and busy shares between two snapshots of one loader's counters
 * (before taken earlier; NULL: since the loader's first stk_loader_next()).
 * Sampling stk_loader_stats() every second or every step and passing the
 * previous snapshot shows a stall as a dip, where the cumulative counters
 * only show it as a lower average. A pure function; an interval without
 * wall time gives zeros but for the label mixing (counts alone: also
 * stk_verify()'s, where each shard counts as one batch).
 */
STK_API void stk_stats_rates_sized(const struct stk_stats *now, const struct stk_stats *before,
                                   size_t stats_size, struct stk_rates *out, size_t rates_size);
#define stk_stats_rates(now, before, out)                                                      \
    stk_stats_rates_sized((now), (before), sizeof(struct stk_stats), (out),                     \
                          sizeof(struct stk_rates))

/* ---- Dataset index and verification ------------------------------------ */

/* Flags for the functions that write files (stk_index_build,
 * stk_writer_create). Output files are always written to a temporary file
 * of their own beside the final name (NAME.tmp.PID.N, created exclusively,
 * so nothing planted there, a symbolic link included, is followed),
 * fsynced, renamed into place and their directory fsynced: a name holds a
 * whole file or what it held before. */
enum stk_output_flags {
    /* Replace existing outputs. Without it an existing output name (file,
     * directory or link) is refused with STK_EEXIST and left as it is. */
    STK_OUTPUT_OVERWRITE = 1
};

/*
 * Count the samples of every shard named by the patterns (as
 * stk_loader_create() expands them), with the options' grouping rules,
 * limits and on_error policy, using opts->threads threads, and write the
 * dataset index to path (see stk_output_flags: an existing path is
 * STK_EEXIST, found before any shard is read, unless flags has
 * STK_OUTPUT_OVERWRITE; a path where no file can be made, STK_EIO, also
 * before). The file is created 0600 and names shards by
 * their redacted URLs (stk_redact_url()), never their credentials: a URL
 * that redaction changes is told apart by a keyed hash of it, so a loader
 * given the same URLs, secrets and all, finds them. stats, when not NULL,
 * receives the counters (samples = total). Returns 0 or an STK_E* code
 * with a message in errbuf.
 */
STK_API int stk_index_build_sized(const struct stk_options *opts, const char *const *patterns,
                                  size_t n, const char *path, unsigned flags,
                                  struct stk_stats *stats, size_t stats_size, char *errbuf,
                                  size_t errbuf_size);
#define stk_index_build(opts, patterns, n, path, flags, stats, errbuf, errbuf_size)            \
    stk_index_build_sized((opts), (patterns), (n), (path), (flags), (stats),                   \
                          sizeof(struct stk_stats), (errbuf), (errbuf_size))

/*
 * Check the dataset index at path against the shards the patterns name, as
 * stk_loader_create() with opts->index_path = path does before reading
 * (for a process that receives an index from elsewhere, such as a Dask
 * worker, before it trusts it): the file is a well-formed index of this
 * version, holds every shard, counts no shard above
 * opts->max_samples_per_shard, and every local shard still has the size
 * and modification time it records. Remote shards are compared (ETag,
 * size) and every count is checked by the loader as it reads them.
 * Returns 0, STK_EINDEX (malformed, incomplete or stale; the message names
 * the shard and says to run `stoker index` again), STK_ENOENT or STK_EIO
 * (the file), STK_EINVAL (options, patterns) or STK_ENOMEM, with a message
 * in errbuf. Thread-safe; reads no shard.
 */
STK_API int stk_index_check(const struct stk_options *opts, const char *const *patterns,
                            size_t n, const char *path, char *errbuf, size_t errbuf_size);

/*
 * Read every sample of every shard named by the patterns (expanded as
 * stk_loader_create() does) with the options' grouping rules and limits,
 * and check it: tar structure and sample grouping always (also gzip CRCs,
 * and that only zeros follow each shard's end-of-archive marker); with a
 * transform set, also that the sample has a jpg/jpeg/png member that
 * decodes whole (bombs, truncation and corruption included), a label as
 * the options ask, and the members require_members names. It never stops
 * at bad data, whatever opts->on_error says: each problem goes to opts->log
 * at STK_LOG_WARN naming the shard and the key,
 * member or byte offset, and is counted in stats: samples (all read),
 * samples_skipped (bad ones), shards_failed (shards that could not be
 * opened or read to their end), shards_empty (shards read cleanly that
 * hold no sample: each is reported too), images_decoded. Uses
 * opts->threads threads, a shard each. Returns 0 once everything was read (problems or not: see
 * stats), else an STK_E* code (no shards, no memory) with a message in
 * errbuf.
 */
STK_API int stk_verify_sized(const struct stk_options *opts, const char *const *patterns, size_t n,
                             struct stk_stats *stats, size_t stats_size, char *errbuf,
                             size_t errbuf_size);
#define stk_verify(opts, patterns, n, stats, errbuf, errbuf_size)                              \
    stk_verify_sized((opts), (patterns), (n), (stats), sizeof(struct stk_stats), (errbuf),       \
                     (errbuf_size))

/* ---- Writing shards ---------------------------------------------------- */

/*
 * Writing shards. A writer puts samples into WebDataset tar shards named by
 * pattern, a printf pattern with exactly one %d, in the file name (e.g.
 * "out/train-%06d.tar", numbered from 0), starting the next shard before a
 * sample that would make the current one hold more than max_samples
 * samples or max_bytes bytes of member data (a sample larger than max_bytes
 * gets a shard of its own). The directory is created if missing (with its
 * missing parents, as mkdir -p does); one that cannot be is STK_EIO from
 * stk_writer_create(), naming it.
 * Members are written as KEY.EXT in sorted extension order, mode 0444, fixed
 * owner and time, so equal input gives equal bytes. Keys and extensions are
 * bytes, written exactly as given whatever the locale (the output does not
 * depend on it): valid UTF-8 names that need pax (non-ASCII, or longer than
 * ustar holds) as pax UTF-8 path records, other bytes as they are under
 * hdrcharset=BINARY, as Python's tarfile writes them. Not thread-safe: one
 * writer per thread.
 *
 * A run is published whole or not at all. Each shard is written to a
 * temporary file beside its name (see stk_output_flags) and synced when the
 * next one starts; stk_writer_close() renames them all into place and syncs
 * the directory. A run that fails, or is destroyed without a successful
 * stk_writer_close(), publishes nothing: its temporary files are removed,
 * and the directories stk_writer_create() made. (Part of a run would read as
 * a whole, smaller dataset.)
 *
 * The shards of a run are the files of the directory named PREFIX, a
 * decimal number, SUFFIX, as the pattern names them ("train-", ".tar"); any
 * other such file ("train-7.tar" or "train-000012.tar" beside this run's
 * "train-000000.tar", from a run with another width or more shards) is a
 * shard of an earlier run, which a glob or listing of the shards would read
 * with this one. Without STK_OUTPUT_OVERWRITE, stk_writer_create() refuses
 * (STK_EEXIST, naming the first) when the directory holds one, before
 * anything is written, and stk_writer_close() fails the run whole when one
 * appeared meanwhile (another writer with the same pattern). With it,
 * existing shards are replaced and stk_writer_close() then removes every
 * other file of the family, so that it holds exactly this run's shards;
 * stk_writer_removed() counts them. Directories are never shards. Files with
 * another prefix or suffix (val-000000.tar beside train-000000.tar, a killed
 * run's NAME.tmp.PID.N) are other datasets' and are never touched.
 */
typedef struct stk_writer stk_writer;

/* flags: 0 or STK_OUTPUT_OVERWRITE. Returns 0 with *out set, or
 * STK_EINVAL/STK_EEXIST/STK_EIO/STK_ENOMEM with a message in errbuf. */
STK_API int stk_writer_create(const char *pattern, uint64_t max_samples, uint64_t max_bytes,
                              unsigned flags, stk_writer **out, char *errbuf, size_t errbuf_size);

/* Add one sample: key (no '.' in its last '/'-separated part) and its
 * members (distinct non-empty extensions without '/'; data is copied before
 * the call returns). A bad key or extension is STK_EINVAL and writes
 * nothing (the writer goes on); any other failure (STK_EIO, STK_ENOMEM)
 * ends the run: later calls fail with STK_EINVAL, and nothing of it is
 * published. */
STK_API int stk_writer_add(stk_writer *w, const char *key, const struct stk_member *members,
                           size_t n_members);

/* Finish the last shard and publish the run (see above); *shards and
 * *samples (either may be NULL) get the numbers written, also when it
 * fails. STK_EEXIST: a shard of another run appeared since
 * stk_writer_create() (nothing is published). Call stk_writer_destroy()
 * afterwards in any case. */
STK_API int stk_writer_close(stk_writer *w, uint64_t *shards, uint64_t *samples);

/* Shards of an earlier run that stk_writer_close() removed (only with
 * STK_OUTPUT_OVERWRITE). */
STK_API uint64_t stk_writer_removed(const stk_writer *w);

/* Free the writer; a run not published by stk_writer_close() is removed
 * (see above). NULL is a no-op. */
STK_API void stk_writer_destroy(stk_writer *w);

/* Detailed message of the writer's last failed call ("" if none). */
STK_API const char *stk_writer_errmsg(const stk_writer *w);

/* ---- Utilities --------------------------------------------------------- */

/*
 * Write url with its secrets hidden into buf (size bytes including the NUL;
 * truncated to fit): for "scheme://" URLs the userinfo becomes "***", every
 * query value becomes "***" (keys stay) and a fragment becomes "#***".
 * Plain paths are unchanged. A "pipe:COMMAND" is split into words as
 * allow_pipe describes, and each word is looked at in this order:
 *  1. the word after "-u" or after one of the options --user, --proxy-user,
 *     --password, --passwd, --pass, --token, --secret, --auth, --api-key,
 *     --apikey, --access-key, --secret-key, --secret-access-key,
 *     --session-token, --oauth2-bearer, --cookie (written as a word of its
 *     own, without "=") becomes "***";
 *  2. "NAME: VALUE" (NAME of letters, digits, '-', '_'; a header argument
 *     such as Authorization: or X-Amz-Security-Token:) becomes "NAME: ***"
 *     when NAME looks secret (below) and VALUE is not empty;
 *  3. "NAME=VALUE" (an environment assignment, --password=VALUE, ...)
 *     becomes "NAME=***" when NAME, the text before the first '=' (which
 *     must come before any "://"), looks secret and VALUE is not empty;
 *  4. a URL inside the word (from its scheme, e.g. after "--url=") is
 *     redacted as above;
 * where NAME looks secret when it contains, in any case, "pass", "pwd",
 * "secret", "token", "key", "auth", "cred", "sig", "cookie" or "session".
 * A word that none of these change keeps its exact text (quotes
 * included); a changed one is written back bare, or in double quotes when
 * it holds a blank, quote or backslash, so the command still splits into
 * the same words. Redacting twice changes nothing. This is the form every
 * stoker message uses, the __url__ of samples read from such URLs and what
 * the node cache writes next to a shard. Other secrets on a command line
 * (a password after a short option other than -u, a key in a positional
 * argument) are not recognised: keep them in the environment or in files.
 */
STK_API void stk_redact_url(const char *url, char *buf, size_t size);

/*
 * The rules stoker reads shards by, for tools and bindings that must agree
 * with it (the stoker command and the Python module use these, not copies).
 */

/* Split a member path into its sample key and extension as WebDataset
 * does: the key is the path up to the first '.' of its last part, the
 * extension what follows ("a/b/x.seg.png": key "a/b/x", extension
 * "seg.png"). Returns 1 with the key's length in *key_len and *ext
 * pointing into name, or 0 when the member has no key and a reader
 * ignores it: no '.' in the last part, a last part starting with '.', or
 * a top-level "__NAME__" file. */
STK_API int stk_split_name(const char *name, size_t *key_len, const char **ext);

/* How stoker reads a member, by the last '.'-separated part of its
 * (lower-case) extension, as WebDataset's default decoders do. */
enum stk_member_kind {
    STK_MEMBER_BYTES = 0, /* anything else: bytes */
    STK_MEMBER_INT = 1,   /* cls, cls2, class, count, index, inx, id: a decimal integer */
    STK_MEMBER_TEXT = 2,  /* txt, text, transcript: UTF-8 text */
    STK_MEMBER_JSON = 3,  /* json, jsn: a JSON document */
    STK_MEMBER_IMAGE = 4  /* jpg, jpeg, png: the image a loader decodes */
};
STK_API int stk_member_kind(const char *ext); /* an enum stk_member_kind */

/* One character of text as stoker shows names that come from shards:
 * newline, tab and CR as \n \t \r, other control characters (C0, DEL, and
 * U+0080..U+009F in UTF-8) as \xHH per byte, with backslash nonzero also a
 * backslash as \\ (text that has been escaped once keeps its escapes with
 * backslash 0), anything else as it is. Writes the escaped form of the
 * character at s (not at its NUL) into out (not NUL-terminated) and
 * returns its length; *used gets the bytes of s it stands for. */
#define STK_ESCAPED_MAX 8
STK_API size_t stk_escape_char(const char *s, int backslash, char out[STK_ESCAPED_MAX],
                               size_t *used);

/* The rank and world size a loader runs as (stk_options.rank and
 * world_size): each one given (>= 0) as it is, and each -1 from the first
 * pair of environment variables set among RANK/WORLD_SIZE,
 * SLURM_PROCID/SLURM_NTASKS and OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE,
 * else rank 0 of 1. Returns 0, or STK_EINVAL with a message in errbuf (a
 * variable that is no number, a rank not below the world size). */
/* The node of every shard under node_affinity with `nodes` nodes, as a
 * loader of these options (seed, shuffle) deals them for the whole run:
 * node_of[i] for shard i of n_shards; counts: samples per shard (a dataset
 * index; NULL: shards dealt by number). A shard's node is the best-ranked
 * by hash(seed, shard, node) with room under a cap, so that runs at other
 * node counts place most shards alike (docs/node-cache.md). 0 or
 * STK_ENOMEM. */
STK_API int stk_node_split(size_t n_shards, const uint64_t *counts, uint64_t seed, int shuffle,
                           int nodes, uint32_t *node_of);

STK_API int stk_resolve_rank(int rank, int world_size, int *rank_out, int *world_out,
                             char *errbuf, size_t errbuf_size);

#ifdef __cplusplus
}
#endif

#endif /* STOKER_H */
