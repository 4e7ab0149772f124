/*
 * check_ipc_event_gpu.c: what the driver does with a CUDA IPC event across
 * two processes, in both directions, the two that device slots rely on
 * (daemon/delivery/devslots.h): feedd creates every event; it records
 * `ready` and the client waits on it (creator records, importer waits),
 * and the client records `done` and feedd waits on it (importer records,
 * creator waits). Each test holds the recording stream with a host
 * function, checks that the waiting stream's work has not run after a
 * while (and that the event reads as not ready), lets the recorder go,
 * and checks that the waiter then finishes.
 *
 * And the pinning the client's copies rely on (client_gpu.c): a shared
 * memfd mapping registered with cudaHostRegister, writable and read-only.
 *
 * Needs a GPU (exit 77 without one). Each process initialises CUDA after
 * the fork.
 */
#include <check.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "gpu_listed.h"

#define CK_CUDA(call) ck_assert_msg((call) == cudaSuccess, "%s failed", #call)

#define NOT_YET_MS 300 /* a wait that did not hold would have finished by then */

/* Holds its stream until a byte arrives on the pipe whose read end is arg. */
static void CUDART_CB hold_on_pipe(void *arg)
{
	char ch;
	(void)!read((int)(intptr_t)arg, &ch, 1);
}

/* The waiter's side: a stream that waits on ev, then a small memset behind
 * it. Returns the stream; *ret_dev is the memset's target. */
static cudaStream_t wait_then_work(cudaEvent_t ev, void **ret_dev)
{
	cudaStream_t s;
	CK_CUDA(cudaStreamCreate(&s));
	CK_CUDA(cudaMalloc(ret_dev, 4));
	CK_CUDA(cudaStreamWaitEvent(s, ev, 0));
	CK_CUDA(cudaMemsetAsync(*ret_dev, 0x5a, 4, s));
	return s;
}

/* 1 when neither s nor ev has completed NOT_YET_MS after now. */
static int still_held(cudaStream_t s, cudaEvent_t ev)
{
	usleep(NOT_YET_MS * 1000);
	return cudaStreamQuery(s) == cudaErrorNotReady && cudaEventQuery(ev) == cudaErrorNotReady;
}

/* The importer (a child) records the creator's event behind a held
 * stream; the creator's stream waits on it. */
START_TEST(test_ipc_event_importer_records_creator_waits)
{
	int h2c[2], ack[2], go[2];
	ck_assert(!pipe(h2c) && !pipe(ack) && !pipe(go));
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		cudaIpcEventHandle_t h;
		cudaEvent_t ev;
		cudaStream_t s;
		char ok = read(h2c[0], &h, sizeof(h)) == sizeof(h) && cudaSetDevice(0) == cudaSuccess &&
			  cudaIpcOpenEventHandle(&ev, h) == cudaSuccess &&
			  cudaStreamCreate(&s) == cudaSuccess &&
			  cudaLaunchHostFunc(s, hold_on_pipe, (void *)(intptr_t)go[0]) == cudaSuccess &&
			  cudaEventRecord(ev, s) == cudaSuccess;
		(void)!write(ack[1], &ok, 1);
		_exit(ok && cudaStreamSynchronize(s) == cudaSuccess ? 0 : 1);
	}
	CK_CUDA(cudaSetDevice(0));
	cudaEvent_t ev;
	cudaIpcEventHandle_t h;
	CK_CUDA(cudaEventCreateWithFlags(&ev, cudaEventInterprocess | cudaEventDisableTiming));
	CK_CUDA(cudaIpcGetEventHandle(&h, ev));
	ck_assert_int_eq(write(h2c[1], &h, sizeof(h)), sizeof(h));
	char ok = 0;
	ck_assert_int_eq(read(ack[0], &ok, 1), 1);
	ck_assert_msg(ok, "the importer could not open and record the event");
	void *dev;
	cudaStream_t s = wait_then_work(ev, &dev);
	int held = still_held(s, ev);
	ck_assert_int_eq(write(go[1], "g", 1), 1);
	CK_CUDA(cudaStreamSynchronize(s));
	int status = 0;
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the importer failed");
	ck_assert_msg(held, "a stream waiting on an IPC event recorded by the importer did not "
		      "wait for it (the creator does not see the importer's record)");
	cudaFree(dev);
}
END_TEST

/* The creator records its event behind a held stream; the importer's
 * stream waits on it. */
START_TEST(test_ipc_event_creator_records_importer_waits)
{
	int h2c[2], res[2], go[2];
	ck_assert(!pipe(h2c) && !pipe(res) && !pipe(go));
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		cudaIpcEventHandle_t h;
		cudaEvent_t ev;
		char held = 0, done = 0;
		if (read(h2c[0], &h, sizeof(h)) == sizeof(h) && cudaSetDevice(0) == cudaSuccess &&
		    cudaIpcOpenEventHandle(&ev, h) == cudaSuccess) {
			void *dev;
			cudaStream_t s = wait_then_work(ev, &dev);
			held = (char)still_held(s, ev);
			(void)!write(res[1], &held, 1);
			done = cudaStreamSynchronize(s) == cudaSuccess;
		} else {
			(void)!write(res[1], &held, 1);
		}
		(void)!write(res[1], &done, 1);
		_exit(0);
	}
	CK_CUDA(cudaSetDevice(0));
	cudaEvent_t ev;
	cudaIpcEventHandle_t h;
	cudaStream_t s;
	CK_CUDA(cudaEventCreateWithFlags(&ev, cudaEventInterprocess | cudaEventDisableTiming));
	CK_CUDA(cudaIpcGetEventHandle(&h, ev));
	CK_CUDA(cudaStreamCreate(&s));
	CK_CUDA(cudaLaunchHostFunc(s, hold_on_pipe, (void *)(intptr_t)go[0]));
	CK_CUDA(cudaEventRecord(ev, s));
	ck_assert_int_eq(write(h2c[1], &h, sizeof(h)), sizeof(h));
	char held = 0, done = 0;
	ck_assert_int_eq(read(res[0], &held, 1), 1);
	ck_assert_int_eq(write(go[1], "g", 1), 1);
	ck_assert_int_eq(read(res[0], &done, 1), 1);
	CK_CUDA(cudaStreamSynchronize(s));
	waitpid(pid, NULL, 0);
	ck_assert_msg(held, "a stream waiting on an IPC event recorded by its creator did not "
		      "wait for it");
	ck_assert_msg(done, "the importer's stream did not finish once the record completed");
}
END_TEST

/* A MAP_SHARED memfd mapping, as feedd's regions are mapped, can be
 * registered for DMA: writable with no flag, read-only with the flag. */
START_TEST(test_ipc_event_memfd_host_register)
{
	const size_t len = 4 << 20;
	int fd = memfd_create("feed-probe", MFD_CLOEXEC);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, len), 0);
	uint8_t *rw = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	uint8_t *ro = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
	ck_assert(rw != MAP_FAILED && ro != MAP_FAILED);
	memset(rw, 7, len);
	CK_CUDA(cudaSetDevice(0));
	cudaError_t e = cudaHostRegister(rw, len, cudaHostRegisterDefault);
	ck_assert_msg(e == cudaSuccess, "registering a writable memfd mapping: %s",
		      cudaGetErrorString(e));
	e = cudaHostRegister(ro, len, cudaHostRegisterReadOnly);
	ck_assert_msg(e == cudaSuccess, "registering a read-only memfd mapping: %s",
		      cudaGetErrorString(e));
	void *dev;
	CK_CUDA(cudaMalloc(&dev, len));
	CK_CUDA(cudaMemcpy(dev, ro, len, cudaMemcpyHostToDevice));
	CK_CUDA(cudaHostUnregister(rw));
	CK_CUDA(cudaHostUnregister(ro));
	cudaFree(dev);
}
END_TEST

int main(void)
{
	if (!gpu_listed()) {
		printf("skipped: nvidia-smi -L lists no GPU\n");
		return SKIP;
	}
	Suite *s = suite_create("ipc_event_gpu");
	TCase *tc = tcase_create("ipc_event_gpu");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_ipc_event_importer_records_creator_waits);
	tcase_add_test(tc, test_ipc_event_creator_records_importer_waits);
	tcase_add_test(tc, test_ipc_event_memfd_host_register);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
