/*
 * fuzz.h: what every libFuzzer target of tests/fuzz/ shares: the entry
 * point's declaration and an invariant check that stops the run with a
 * message naming the target and what broke (libFuzzer then writes the
 * input that did it as crash-*).
 *
 * Each target runs in one thread, one input at a time; whatever it
 * allocates for an input it frees before returning (LeakSanitizer runs at
 * exit and libFuzzer's -detect_leaks checks each new input).
 */
#ifndef FEED_FUZZ_H
#define FEED_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* An invariant of the function under test; abort() so the input is kept. */
#define FUZZ_CHECK(cond, ...)                                                        \
	do {                                                                         \
		if (!(cond)) {                                                       \
			fprintf(stderr, "%s:%d: invariant '%s' broken: ", __FILE__,  \
				__LINE__, #cond);                                    \
			fprintf(stderr, __VA_ARGS__);                                \
			fputc('\n', stderr);                                         \
			abort();                                                     \
		}                                                                    \
	} while (0)

#endif
