/*
 * gpu_listed.h: whether this machine has a GPU, for every test of
 * tests/gpu (C and CUDA C++): they exit SKIP (77, ctest's "skipped") when
 * `nvidia-smi -L` lists none. Header-only.
 */
#ifndef FEED_TESTS_GPU_LISTED_H
#define FEED_TESTS_GPU_LISTED_H

#include <stdio.h>
#include <string.h>

#define SKIP 77

/* `nvidia-smi -L` lists a GPU. */
static inline int gpu_listed(void)
{
	FILE *p = popen("nvidia-smi -L 2>/dev/null", "r");
	if (!p)
		return 0;
	char line[512];
	int found = 0;
	while (fgets(line, sizeof(line), p))
		if (!strncmp(line, "GPU ", 4))
			found = 1;
	pclose(p);
	return found;
}

#endif
