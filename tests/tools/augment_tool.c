/* SPDX-License-Identifier: MIT */
/*
 * augment_tool.c - drive the augmentation ops and draws from the command
 * line, for tests/integration/test_augment_vs_torchvision.py.
 *
 *   augment_tool op WIDTH HEIGHT OP MAGNITUDE BILINEAR < RGB > RGB
 *   augment_tool draws POLICY N SEED BINS NUM_OPS MAGNITUDE WIDTH HEIGHT
 *   augment_tool table POLICY BINS WIDTH HEIGHT
 *   augment_tool erase PROBABILITY N SEED WIDTH HEIGHT
 *   augment_tool normals N SEED
 *   augment_tool mix MIXUP_ALPHA CUTMIX_ALPHA SWITCH N SEED WIDTH HEIGHT
 *   augment_tool jitter COLOR_JITTER HUE_JITTER GRAYSCALE N SEED
 *
 * op: one operation (its enum stk__aug_op value) on a raw RGB8 image read
 * from stdin, written to stdout (for STK__OP_BLUR, MAGNITUDE is sigma and
 * BILINEAR the kernel size). draws: N lines, one per sample (seed,
 * epoch 0, shard 0, pass 0, position i, through the augmentation stream),
 * of "OP:MAGNITUDE" words (an empty line: no operation). table: a line
 * "OP BIN MAGNITUDE" per op and bin of the policy's space. erase: N lines
 * "TOP LEFT HEIGHT WIDTH", or "-" where nothing is erased. normals: N
 * lines, the standard normal numbers of RandomErasing's value="random",
 * drawn in pairs from one stream (seed, epoch 0, shard 0, pass 0,
 * position 0) as the erase does. mix: N lines
 * "CUTMIX LAMBDA X1 Y1 X2 Y2", the draws of batches 0 to N - 1 (epoch 0,
 * rank 0). jitter: as draws, for ColorJitter and RandomGrayscale alone. POLICY is the
 * value of enum stk_auto_augment. Exits 2 on bad usage.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "image/augment.h"
#include "image/augment_ops.h"
#include "image/augment_policy.h"
#include "pipeline/mix.h"

/* A decimal integer argument (bad text gives 0, which every caller refuses
 * or treats as a plain value). */
static int num(const char *s)
{
    return (int)strtol(s, NULL, 10);
}

static int cmd_op(char **argv)
{
    int w = num(argv[0]), h = num(argv[1]);
    if (w < 1 || h < 1)
        return 2;
    size_t n = (size_t)w * (size_t)h * 3;
    uint8_t *pix = malloc(n), *scratch = malloc(n + STK__AUG_SCRATCH_SLACK);
    if (pix == NULL || scratch == NULL || fread(pix, 1, n, stdin) != n)
        return 2;
    const struct stk__aug_image img = {pix, w, h, scratch};
    enum stk__aug_op op = (enum stk__aug_op)num(argv[2]);
    if (op == STK__OP_BLUR && stk__aug_gaussian_blur(&img, num(argv[4]), strtod(argv[3], NULL)) < 0)
        return 2;
    if (op != STK__OP_BLUR)
        stk__aug_apply(&img, op, strtod(argv[3], NULL), num(argv[4]), NULL);
    int rc = fwrite(pix, 1, n, stdout) == n ? 0 : 2;
    free(pix);
    free(scratch);
    return rc;
}

static struct stk__augment_params params(char **argv)
{
    return (struct stk__augment_params){.policy = (enum stk_auto_augment)num(argv[0]),
                                        .bins = num(argv[1]),
                                        .num_ops = num(argv[2]),
                                        .magnitude = num(argv[3])};
}

static void print_draws(const struct stk__augment_params *p, long n, uint64_t seed, int w, int h)
{
    for (long i = 0; i < n; i++) {
        struct stk__draws d, aug;
        stk__draws_init(&d, seed, 0, 0, 0, (uint64_t)i);
        stk__draws_fork(&d, 1, &aug);
        struct stk__aug_step steps[STK__AUG_MAX_STEPS];
        int k = stk__augment_draw(p, w, h, &aug, steps);
        for (int j = 0; j < k; j++)
            printf("%s%d:%.9g", j ? " " : "", (int)steps[j].op, steps[j].magnitude);
        printf("\n");
    }
}

static int cmd_draws(char **argv)
{
    char *no_ops[] = {argv[0], argv[3], argv[4], argv[5]};
    struct stk__augment_params p = params(no_ops);
    print_draws(&p, num(argv[1]), strtoull(argv[2], NULL, 10), num(argv[6]), num(argv[7]));
    return 0;
}

static int cmd_jitter(char **argv)
{
    struct stk__augment_params p = {.color_jitter = strtod(argv[0], NULL),
                                    .hue_jitter = strtod(argv[1], NULL),
                                    .grayscale_probability = strtod(argv[2], NULL)};
    print_draws(&p, num(argv[3]), strtoull(argv[4], NULL, 10), 8, 8);
    return 0;
}

static int cmd_table(char **argv)
{
    char *args[] = {argv[0], argv[1], "1", "0"};
    struct stk__augment_params p = params(args);
    int bins = p.policy == STK_AUTO_AUGMENT_IMAGENET ? 10 : p.bins;
    for (int op = STK__OP_SHEAR_X; op <= STK__OP_SOLARIZE; op++)
        for (int b = 0; b < bins; b++)
            printf("%d %d %.9g\n", op, b,
                   stk__augment_magnitude(&p, (enum stk__aug_op)op, b, num(argv[2]),
                                          num(argv[3])));
    return 0;
}

static int cmd_erase(char **argv)
{
    double prob = strtod(argv[0], NULL);
    long n = num(argv[1]);
    uint64_t seed = strtoull(argv[2], NULL, 10);
    int w = num(argv[3]), h = num(argv[4]);
    for (long i = 0; i < n; i++) {
        struct stk__draws d;
        stk__draws_init(&d, seed, 0, 0, 0, (uint64_t)i);
        int top, left, bh, bw;
        if (stk__augment_erase_box(prob, w, h, &d, &top, &left, &bh, &bw))
            printf("%d %d %d %d\n", top, left, bh, bw);
        else
            printf("-\n");
    }
    return 0;
}

static int cmd_normals(char **argv)
{
    long n = num(argv[0]);
    struct stk__draws d;
    stk__draws_init(&d, strtoull(argv[1], NULL, 10), 0, 0, 0, 0);
    double z[2];
    for (long i = 0; i < n; i++) {
        if (i % 2 == 0)
            stk__draw_normals(&d, z);
        printf("%.17g\n", z[i % 2]);
    }
    return 0;
}

static int cmd_mix(char **argv)
{
    struct stk__mix_params p = {.mixup_alpha = strtod(argv[0], NULL),
                                .cutmix_alpha = strtod(argv[1], NULL),
                                .switch_probability = strtod(argv[2], NULL),
                                .seed = strtoull(argv[4], NULL, 10)};
    long n = num(argv[3]);
    int w = num(argv[5]), h = num(argv[6]);
    for (long i = 0; i < n; i++) {
        struct stk__mix_draw d;
        stk__mix_draw(&p, (uint64_t)i, w, h, &d);
        printf("%d %.17g %d %d %d %d\n", d.cutmix, d.lambda, d.x1, d.y1, d.x2, d.y2);
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 7 && strcmp(argv[1], "jitter") == 0)
        return cmd_jitter(argv + 2);
    if (argc == 9 && strcmp(argv[1], "mix") == 0)
        return cmd_mix(argv + 2);
    if (argc == 7 && strcmp(argv[1], "op") == 0)
        return cmd_op(argv + 2);
    if (argc == 10 && strcmp(argv[1], "draws") == 0)
        return cmd_draws(argv + 2);
    if (argc == 6 && strcmp(argv[1], "table") == 0)
        return cmd_table(argv + 2);
    if (argc == 7 && strcmp(argv[1], "erase") == 0)
        return cmd_erase(argv + 2);
    if (argc == 4 && strcmp(argv[1], "normals") == 0)
        return cmd_normals(argv + 2);
    fprintf(stderr, "usage: see the comment at the top of augment_tool.c\n");
    return 2;
}
