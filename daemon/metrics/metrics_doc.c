/*
 * metrics_doc.c: every family feedd exports, one row each (see
 * metrics_doc.h): `feedd --list-metrics` prints the rows, and metrics.c and
 * metrics_gpu.c take each family's type and help from them when they
 * render. Never allocates.
 *
 * The rows are in the order metrics.c, metrics_process.c and metrics_gpu.c
 * render; tests/python/test_feedclient_docs_metrics.py scrapes a real feedd
 * and fails on any family or label that differs.
 */
#include "metrics_doc.h"

#include <errno.h>
#include <string.h>

struct met_doc {
	const char *name, *type;
	const char *labels;   /* comma-separated, "" for none */
	const char *shown;    /* when the family is in a scrape */
	const char *help;     /* as # HELP says it */
};

static const struct met_doc met_docs[] = {
	{"feedd_build_info", "gauge", "version", "always",
	 "feedd's version; always 1."},
	{"feedd_connections", "gauge", "", "always",
	 "Client connections open."},
	{"feedd_streams", "gauge", "", "always",
	 "Streams and groups being served."},
	{"feedd_refusals_total", "counter", "reason", "always",
	 "Requests and connections refused, by reason."},
	{"feedd_workers", "gauge", "", "always",
	 "Worker threads."},
	{"feedd_workers_busy", "gauge", "", "always",
	 "Worker threads running a job now."},
	{"feedd_uptime_seconds", "gauge", "", "always",
	 "Seconds since feedd began serving."},
	{"feedd_worker_oldest_job_seconds", "gauge", "", "always",
	 "How long the worker longest in its current job has been in it (0: every worker idle)."},
	{"feedd_metrics_connections", "gauge", "", "always",
	 "HTTP connections open to this metrics server."},
	{"process_cpu_seconds_total", "counter", "", "always",
	 "User and system CPU time, seconds."},
	{"process_resident_memory_bytes", "gauge", "", "where /proc has it",
	 "Resident memory size."},
	{"process_virtual_memory_bytes", "gauge", "", "where /proc has it",
	 "Virtual memory size."},
	{"process_start_time_seconds", "gauge", "", "where /proc has it",
	 "Start time of the process, seconds since 1970."},
	{"process_open_fds", "gauge", "", "where /proc has it",
	 "Open file descriptors."},
	{"process_max_fds", "gauge", "", "always",
	 "The limit of open file descriptors."},
	{"feedd_memory_bytes", "gauge", "", "where /proc has it",
	 "RssAnon + RssShmem of feedd: its own memory and the shared memory it maps."},
	{"feedd_memory_limit_bytes", "gauge", "", "always",
	 "The memory limit of feedd's cgroup; 0 when it has none."},
	{"feedd_config_last_reload_successful", "gauge", "", "always",
	 "Whether the last reload (or the start) applied the config file: 1, or 0 when it "
	 "was refused."},
	{"feedd_config_last_reload_success_timestamp_seconds", "gauge", "", "always",
	 "When the config in force was applied (start or reload), seconds since 1970."},
	{"feedd_config_reloads_total", "counter", "", "always",
	 "Reloads tried."},
	{"feedd_config_reload_failures_total", "counter", "", "always",
	 "Reloads refused."},
	{"feedd_datasets_configured", "gauge", "", "always",
	 "Datasets the config in force names."},
	{"feedd_datasets_open", "gauge", "", "always",
	 "Datasets served now."},
	{"feedd_dataset_left_out", "gauge", "dataset,reason", "always",
	 "1 for each configured dataset not served, with why."},
	{"feedd_datasets_left_out", "gauge", "reason", "always",
	 "Configured datasets not served, by reason."},
	{"feedd_samples_total", "counter", "user,dataset,job,group", "always",
	 "Samples published to the streams or groups with these labels."},
	{"feedd_batches_total", "counter", "user,dataset,job,group", "always",
	 "Batches published (a group's once)."},
	{"feedd_bytes_total", "counter", "user,dataset,job,group", "always",
	 "Bytes of batches published."},
	{"feedd_reader_wait_seconds_total", "counter", "user,dataset,job,group", "always",
	 "Time the readers waited for a batch, as their clients report it (clamped to each"
	 " stream's age)."},
	{"feedd_worker_seconds_total", "counter", "user,dataset,job,group", "always",
	 "Worker thread CPU time spent building batches."},
	{"feedd_samples_replaced_total", "counter", "user,dataset,job,group", "always",
	 "Samples that failed to decode and were replaced by the next good one (on_error skip)."},
	{"feedd_batches_detached_total", "counter", "user,dataset,job,group", "always",
	 "Batches the readers moved off their slots into private memory (views held past "
	 "their slot), as their clients report it."},
	{"feedd_credits", "gauge", "user,dataset,job,group", "always",
	 "Credits of the open streams (a group's depth)."},
	{"feedd_credits_in_use", "gauge", "user,dataset,job,group", "always",
	 "Slots being built, ready or held."},
	{"feedd_readers", "gauge", "user,dataset,job,group", "while a stream of the labels is open",
	 "Readers of the open streams (a group's members)."},
	{"feedd_shm_bytes", "gauge", "user,dataset,job,group", "while a stream of the labels is open",
	 "Shared memory of the open streams' regions (control, data, release)."},
	{"feedd_slot_bytes", "gauge", "user,dataset,job,group", "while a stream of the labels is open",
	 "Bytes of one data slot (the largest among the open streams)."},
	{"feedd_dataset_samples_total", "counter", "dataset", "always",
	 "Samples published from the dataset, every stream and group (open or closed) together "
	 "(a mixture's under its own label, as its streams' series)."},
	{"feedd_dataset_batches_total", "counter", "dataset", "always",
	 "Batches published from the dataset."},
	{"feedd_dataset_bytes_total", "counter", "dataset", "always",
	 "Bytes of batches published from the dataset."},
	{"feedd_dataset_reader_wait_seconds_total", "counter", "dataset", "always",
	 "Time the readers of the dataset's streams waited for a batch."},
	{"feedd_dataset_worker_seconds_total", "counter", "dataset", "always",
	 "Worker thread CPU time spent building the dataset's batches."},
	{"feedd_dataset_samples_replaced_total", "counter", "dataset", "always",
	 "Samples of the dataset replaced (on_error skip)."},
	{"feedd_dataset_batches_detached_total", "counter", "dataset", "always",
	 "Batches of the dataset's streams their readers moved into private memory."},
	{"feedd_dataset_streams_closed_total", "counter", "dataset", "always",
	 "Streams and groups over the dataset that closed."},
	{"feedd_cache_hits_total", "counter", "dataset", "always",
	 "Blocks found decoded in the block cache."},
	{"feedd_cache_misses_total", "counter", "dataset", "always",
	 "Blocks read and decoded."},
	{"feedd_cache_evictions_total", "counter", "dataset", "always",
	 "Blocks evicted from the cache."},
	{"feedd_cache_bytes", "gauge", "dataset", "always",
	 "Decoded bytes the cache holds."},
	{"feedd_cache_capacity_bytes", "gauge", "", "always",
	 "The block cache's budget (cache_bytes)."},
	{"feedd_cache_entries", "gauge", "", "always",
	 "Blocks the cache holds."},
	{"feedd_remote_requests_total", "counter", "", "always",
	 "HTTP requests of remote datasets, every try."},
	{"feedd_remote_retries_total", "counter", "", "always",
	 "Requests tried again after a failure."},
	{"feedd_remote_failures_total", "counter", "", "always",
	 "Block reads that failed after every try."},
	{"feedd_remote_bytes_total", "counter", "", "always",
	 "Body bytes received from remote datasets."},
	{"feedd_dataset_state", "gauge", "dataset,state", "always",
	 "Each dataset's state: 1 for the one it is in (pending: a remote one still "
	 "opening; failed: left out)."},
	{"feedd_remote_staged_bytes", "gauge", "", "always",
	 "Bytes of remote blocks held in memory by the fetcher (counted in cache_bytes)."},
	{"feedd_disk_tier_hits_total", "counter", "", "with cache_dir",
	 "Blocks read back from cache_dir, verified."},
	{"feedd_disk_tier_misses_total", "counter", "", "with cache_dir",
	 "Blocks not in cache_dir (or bad)."},
	{"feedd_disk_tier_corrupt_total", "counter", "", "with cache_dir",
	 "Files of cache_dir that failed their checksum, deleted."},
	{"feedd_disk_tier_stored_total", "counter", "", "with cache_dir",
	 "Blocks written to cache_dir."},
	{"feedd_disk_tier_evictions_total", "counter", "", "with cache_dir",
	 "Files evicted from cache_dir."},
	{"feedd_disk_tier_bytes", "gauge", "", "with cache_dir",
	 "Bytes cache_dir holds."},
	{"feedd_disk_tier_files", "gauge", "", "with cache_dir",
	 "Blocks cache_dir holds."},
	{"feedd_disk_tier_capacity_bytes", "gauge", "", "with cache_dir",
	 "cache_dir's budget (cache_dir_bytes)."},
	{"feedd_gpu_memory_bytes", "gauge", "gpu", "with NVML",
	 "GPU memory feedd's process holds on the GPU (its context, kernels and device "
	 "slots), as NVML reports it."},
};

const char *met_doc_find(const char *name, const char **ret_type)
{
	for (size_t i = 0; i < sizeof(met_docs) / sizeof(met_docs[0]); i++)
		if (strcmp(met_docs[i].name, name) == 0) {
			*ret_type = met_docs[i].type;
			return met_docs[i].help;
		}
	return NULL;
}

int met_doc_print(FILE *out)
{
	for (size_t i = 0; i < sizeof(met_docs) / sizeof(met_docs[0]); i++) {
		const struct met_doc *m = &met_docs[i];
		fprintf(out, "%s\t%s\t%s\t%s\t%s\n", m->name, m->type, *m->labels ? m->labels : "-",
			m->shown, m->help);
	}
	return fflush(out) || ferror(out) ? -EIO : 0;
}
