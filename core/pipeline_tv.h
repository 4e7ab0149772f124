/*
 * pipeline_tv.h: core/'s private rows of pipeline_ops.c's op table for the ops
 * torchvision has and the first rounds did not (vflip, pad,
 * random_perspective, gaussian_noise) and the containers over
 * sub-pipelines (random_apply, random_choice, random_order). Kept in their
 * own header so the table in pipeline_ops.c grows by one line; augment_tv.c
 * runs them.
 *
 * Included by pipeline_ops.c (the rows) and pipeline_parse.c (the aliases)
 * only, after pipeline_priv.h. Never: included elsewhere.
 */
#ifndef FEED_PIPELINE_TV_H
#define FEED_PIPELINE_TV_H

#define PIPE_TV_OP_ROWS                                                                   \
	[PIPE_VFLIP] = {"vflip", {PK_P, PK_FIELD}, 1, 0},                                 \
	[PIPE_PAD] = {"pad", {PK_PADDING, PK_FILL, PK_PADDING_MODE, PK_FIELD}, 3,         \
		      PKB(PK_PADDING)},                                                   \
	[PIPE_RANDOM_PERSPECTIVE] = {"random_perspective",                                \
				     {PK_DISTORTION_SCALE, PK_P, PK_INTERPOLATION, PK_FILL, \
				      PK_FIELD},                                          \
				     4, 0},                                               \
	[PIPE_GAUSSIAN_NOISE] = {"gaussian_noise", {PK_MEAN, PK_SIGMA, PK_CLIP, PK_FIELD}, \
				 3, 0},                                                   \
	[PIPE_RANDOM_APPLY] = {"random_apply", {PK_TRANSFORMS, PK_P, PK_FIELD}, 2,        \
			       PKB(PK_TRANSFORMS)},                                       \
	[PIPE_RANDOM_CHOICE] = {"random_choice", {PK_TRANSFORMS, PK_P, PK_FIELD}, 2,      \
				PKB(PK_TRANSFORMS)},                                      \
	[PIPE_RANDOM_ORDER] = {"random_order", {PK_TRANSFORMS, PK_FIELD}, 1,              \
			       PKB(PK_TRANSFORMS)},

/* Other names torchvision users write for feedd's ops. */
#define PIPE_TV_ALIASES                                                                   \
	{"random_horizontal_flip", PIPE_HFLIP}, {"random_vertical_flip", PIPE_VFLIP},

#endif
