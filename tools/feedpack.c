/*
 * feedpack.c: feedpack's entry point. Owns the command table, the command
 * line (options, their ranges, --help) and the mapping of errors to exit
 * codes: 0 success, 1 bad input or I/O error (one line
 * "feedpack: <file>: <what>" on stderr), 2 usage error. The commands live
 * in feedpack_<cmd>.c. Single-threaded; never prints on stdout except
 * --help and what the command itself reports.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "feedpack.h"

/* Which option groups a command takes. */
enum {
	CMD_INGEST = 1u << 0, /* -o, --name, --block-bytes, ... */
	CMD_TOKENS = 1u << 1, /* --dtype, --seq-len */
	CMD_IMAGES = 1u << 2, /* --skip-bad, --check */
	CMD_VERIFY = 1u << 3, /* --decode */
};

struct pack_cmd {
	const char *name;
	const char *synopsis;  /* positional arguments for usage lines */
	const char *summary;   /* one paragraph for --help */
	int min_pos;           /* positional arguments accepted */
	int max_pos;           /* -1: no limit */
	unsigned groups;       /* CMD_* */
	int (*run)(const struct pack_opts *o, struct feed_err *err);
};

static const struct pack_cmd pack_cmds[] = {
	{"idx", "IMAGES LABELS -o DIR",
	 "Packs an IDX image file (u8, N x H x W) and its IDX label file, plain or\n"
	 "gzip, into fields 'image' (u8 [H,W,1]) and 'label' (u8 scalar).",
	 2, 2, CMD_INGEST, pack_cmd_idx},
	{"npy", "NAME=FILE.npy [NAME=FILE.npy ...] -o DIR",
	 "Packs .npy arrays, one field per array. The first axis is the sample\n"
	 "axis; every array must have the same length. Little-endian numeric and\n"
	 "bool dtypes, C order.",
	 1, -1, CMD_INGEST, pack_cmd_npy},
	{"tokens", "FILE... --dtype uint16|uint32 (--seq-len N | --doc-sep ID) -o DIR",
	 "Reads flat little-endian token files ('-': stdin). With --seq-len, cuts\n"
	 "one file into sequences of N tokens, field 'tokens' (u16 or u32, [N]); a\n"
	 "trailing partial sequence is dropped. With --doc-sep, splits the files\n"
	 "into documents after each separator token (kept as the document's last\n"
	 "token; each file's end also ends a document): a token-document dataset,\n"
	 "field 'tokens' (variable; u16 when the vocabulary fits), for concat and\n"
	 "pack. A file whose size is not a whole number of tokens, or that reads\n"
	 "as text, is refused.",
	 1, -1, CMD_INGEST | CMD_TOKENS, pack_cmd_tokens},
	{"megatron", "PREFIX... -o DIR",
	 "Imports Megatron-LM indexed datasets (PREFIX.bin + PREFIX.idx, the\n"
	 "MMIDIDX format of preprocess_data.py), one sample per document, field\n"
	 "'tokens' (variable, u16 or i32 as the header says). Several prefixes\n"
	 "are concatenated in order and must share a dtype. A .bin whose size\n"
	 "disagrees with its .idx is refused.",
	 1, -1, CMD_INGEST, pack_cmd_megatron},
	{"files", "DIR_IN -o DIR",
	 "Packs every regular file under DIR_IN (recursive, sorted by relative\n"
	 "path) into fields 'data' (u8, variable) and 'name' (str, the path).",
	 1, 1, CMD_INGEST, pack_cmd_files},
	{"imagefolder", "DIR_IN -o DIR",
	 "Packs a folder of class subfolders (torchvision ImageFolder's layout:\n"
	 "DIR_IN/CLASS/.../IMAGE) into fields 'image' (u8, variable: each file's\n"
	 "bytes as they are) and 'label' (i64, the class's index in sorted order).\n"
	 "Classes, files and their order are ImageFolder's; files without one of\n"
	 "its extensions are ignored. Every image's header is checked: a file that\n"
	 "is not a readable JPEG or PNG is an error naming it. The class names and\n"
	 "the largest image dimensions are kept in the manifest. Defaults here:\n"
	 "one image per block (a random read reads just that image) and --level 1\n"
	 "(zstd does not shrink JPEG or PNG files). Each image's path relative\n"
	 "to DIR_IN is kept (paths.txt): feedd's errors name the file. With\n"
	 "--check, writes nothing: decodes every image in full on every core, as\n"
	 "feedd would, lists those that fail, and exits 1 if any does.",
	 1, 1, CMD_INGEST | CMD_IMAGES, pack_cmd_imagefolder},
	{"wds", "TAR... -o DIR [--fields E,...] [--on-missing skip]", "", 1, -1, 0, NULL}, /* main() */
	{"inspect", "DIR",
	 "Prints a dataset's name, version, schema, shards and sizes.",
	 1, 1, 0, pack_cmd_inspect},
	{"verify", "DIR [--decode]",
	 "Opens a dataset and reads and checks every block; exits 1 naming the\n"
	 "shard and block on the first corruption. With --decode, also decodes\n"
	 "every image of its first image field in full on every core, lists each\n"
	 "that fails by its path (or sample index), and exits 1 if any does.",
	 1, 1, CMD_VERIFY, pack_cmd_verify},
};
#define PACK_NCMDS (sizeof(pack_cmds) / sizeof(pack_cmds[0]))

static const char pack_ingest_help[] =
	"options:\n"
	"  -o, --output DIR       dataset directory to create (must not exist)\n"
	"      --name NAME        dataset name (default: last component of DIR)\n"
	"      --block-bytes N    target decoded block size (default 64k)\n"
	"      --block-records N  at most N records per block (1: one per block)\n"
	"      --level L          zstd level 1..19 (default 3)\n"
	"      --shard-bytes N    start a new shard past N bytes (default 256M)\n"
	"      --quiet            no progress line (drawn only on a terminal)\n"
	"Numbers take an optional k, M or G suffix (powers of 1024).\n";

static const char pack_images_help[] =
	"      --skip-bad         leave out files that are not readable JPEG or PNG\n"
	"                         images, listing each on stderr\n"
	"      --check            write nothing: decode every image in full, list\n"
	"                         those that fail (exit 1 if any)\n";

static const char pack_verify_help[] =
	"options:\n"
	"      --decode           also decode every image in full, listing those\n"
	"                         that fail (exit 1 if any)\n";

static const char pack_tokens_help[] =
	"      --dtype T          uint16 or uint32 (required)\n"
	"      --seq-len N        tokens per sequence (fixed sequences)\n"
	"      --doc-sep ID       the token that ends a document (documents)\n"
	"      --vocab-size N     every token must be below N (documents)\n";

enum { OPT_NAME = 256, OPT_BLOCK_BYTES, OPT_BLOCK_RECORDS, OPT_LEVEL, OPT_SHARD_BYTES,
       OPT_DTYPE, OPT_SEQ_LEN, OPT_SKIP_BAD, OPT_CHECK, OPT_DECODE, OPT_DOC_SEP,
       OPT_VOCAB_SIZE, OPT_QUIET };

static const struct option pack_long_opts[] = {
	{"output", required_argument, NULL, 'o'},
	{"name", required_argument, NULL, OPT_NAME},
	{"block-bytes", required_argument, NULL, OPT_BLOCK_BYTES},
	{"block-records", required_argument, NULL, OPT_BLOCK_RECORDS},
	{"level", required_argument, NULL, OPT_LEVEL},
	{"shard-bytes", required_argument, NULL, OPT_SHARD_BYTES},
	{"dtype", required_argument, NULL, OPT_DTYPE},
	{"seq-len", required_argument, NULL, OPT_SEQ_LEN},
	{"doc-sep", required_argument, NULL, OPT_DOC_SEP},
	{"vocab-size", required_argument, NULL, OPT_VOCAB_SIZE},
	{"skip-bad", no_argument, NULL, OPT_SKIP_BAD},
	{"check", no_argument, NULL, OPT_CHECK},
	{"decode", no_argument, NULL, OPT_DECODE},
	{"quiet", no_argument, NULL, OPT_QUIET},
	{"help", no_argument, NULL, 'h'},
	{NULL, 0, NULL, 0},
};

static void usage_main(FILE *f)
{
	fprintf(f, "usage: feedpack COMMAND ARGS...\n\ncommands:\n");
	for (size_t i = 0; i < PACK_NCMDS; i++)
		fprintf(f, "  feedpack %s %s\n", pack_cmds[i].name, pack_cmds[i].synopsis);
	fprintf(f, "\n'feedpack COMMAND --help' describes a command.\n");
}

static void usage_cmd(const struct pack_cmd *c)
{
	printf("usage: feedpack %s %s%s\n\n%s\n\n", c->name, c->synopsis,
	       c->groups & CMD_INGEST ? " [options]" : "", c->summary);
	if (c->groups & CMD_INGEST)
		printf("%s", pack_ingest_help);
	if (c->groups & CMD_TOKENS)
		printf("%s", pack_tokens_help);
	if (c->groups & CMD_IMAGES)
		printf("%s", pack_images_help);
	if (c->groups & CMD_VERIFY)
		printf("%s", pack_verify_help);
}

/* Prints a usage error and returns exit code 2. */
static int usage_error(const struct pack_cmd *c, const char *msg)
{
	fprintf(stderr, "feedpack: %s\n", msg);
	if (c)
		fprintf(stderr, "usage: feedpack %s %s\nTry 'feedpack %s --help'.\n", c->name,
			c->synopsis, c->name);
	else
		usage_main(stderr);
	return 2;
}

/* Parses a decimal count with an optional k/M/G suffix, in [lo, hi]. */
static int parse_count(const char *s, uint64_t lo, uint64_t hi, uint64_t *ret)
{
	char *end;
	unsigned long long v;
	unsigned shift = 0;

	if (*s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno)
		return -EINVAL;
	if (*end == 'k' || *end == 'K')
		shift = 10;
	else if (*end == 'M')
		shift = 20;
	else if (*end == 'G')
		shift = 30;
	if (shift)
		end++;
	if (*end || v > (UINT64_MAX >> shift))
		return -EINVAL;
	v <<= shift;
	if (v < lo || v > hi)
		return -ERANGE;
	*ret = v;
	return 0;
}

/* The long name of option opt. */
static const char *opt_name(int opt)
{
	for (const struct option *l = pack_long_opts; l->name; l++)
		if (l->val == opt)
			return l->name;
	return "?";
}

/* Applies one option; returns 0 or writes a message into msg. */
static int apply_opt(struct pack_opts *o, int opt, const char *arg, char *msg, size_t cap)
{
	uint64_t v = 0;
	int rc = 0;

	switch (opt) {
	case 'o': o->out_dir = arg; return 0;
	case OPT_NAME: o->name = arg; return 0;
	case OPT_SKIP_BAD: o->skip_bad = true; return 0;
	case OPT_CHECK: o->check = true; return 0;
	case OPT_DECODE: o->decode = true; return 0;
	case OPT_QUIET: o->quiet = true; return 0;
	case OPT_DTYPE:
		o->tok_dtype = feed_dtype_parse(arg);
		if (o->tok_dtype != FEED_DTYPE_U16 && o->tok_dtype != FEED_DTYPE_U32)
			break;
		return 0;
	case OPT_BLOCK_BYTES:
		if ((rc = parse_count(arg, 1, 1ull << 30, &v)) == 0)
			o->block_bytes = v, o->block_bytes_set = true;
		break;
	case OPT_BLOCK_RECORDS:
		if ((rc = parse_count(arg, 1, UINT32_MAX, &v)) == 0)
			o->block_records = (uint32_t)v;
		break;
	case OPT_LEVEL:
		if ((rc = parse_count(arg, 1, 19, &v)) == 0)
			o->level = (int)v, o->level_set = true;
		break;
	case OPT_SHARD_BYTES:
		if ((rc = parse_count(arg, 1, UINT64_MAX, &v)) == 0)
			o->shard_bytes = v;
		break;
	case OPT_SEQ_LEN:
		if ((rc = parse_count(arg, 1, PACK_MAX_RECORD / 4, &v)) == 0)
			o->seq_len = v;
		break;
	case OPT_DOC_SEP:
		if ((rc = parse_count(arg, 0, UINT32_MAX, &v)) == 0)
			o->doc_sep = v, o->doc_sep_set = true;
		break;
	case OPT_VOCAB_SIZE:
		if ((rc = parse_count(arg, 1, 1ull << 32, &v)) == 0)
			o->vocab_size = v;
		break;
	}
	if (opt != OPT_DTYPE && rc == 0)
		return 0;
	snprintf(msg, cap, "invalid value '%s' for --%s", arg, opt_name(opt));
	return -EINVAL;
}

/* Is option opt accepted by a command with these groups? */
static bool opt_allowed(int opt, unsigned groups)
{
	if (opt == OPT_DTYPE || opt == OPT_SEQ_LEN || opt == OPT_DOC_SEP || opt == OPT_VOCAB_SIZE)
		return groups & CMD_TOKENS;
	if (opt == OPT_SKIP_BAD || opt == OPT_CHECK)
		return groups & CMD_IMAGES;
	if (opt == OPT_DECODE)
		return groups & CMD_VERIFY;
	return groups & CMD_INGEST;
}

/* Strips trailing slashes from -o and derives the default name. */
static int finish_opts(struct pack_opts *o, const struct pack_cmd *c, char *msg, size_t cap)
{
	if (!(c->groups & CMD_INGEST))
		return 0;
	if (o->check) {  /* writes nothing */
		if (o->out_dir || o->skip_bad)
			return snprintf(msg, cap, "--check writes nothing: no -o, no --skip-bad"),
			       -EINVAL;
		return 0;
	}
	if (!o->out_dir || !*o->out_dir)
		return snprintf(msg, cap, "missing -o DIR"), -EINVAL;
	if (snprintf(o->out_buf, sizeof(o->out_buf), "%s", o->out_dir) >= (int)sizeof(o->out_buf))
		return snprintf(msg, cap, "output path too long"), -EINVAL;
	size_t n = strlen(o->out_buf);
	while (n > 1 && o->out_buf[n - 1] == '/')
		o->out_buf[--n] = '\0';
	o->out_dir = o->out_buf;
	if (!o->name) {
		const char *slash = strrchr(o->out_buf, '/');
		snprintf(o->name_buf, sizeof(o->name_buf), "%s", slash ? slash + 1 : o->out_buf);
		o->name = o->name_buf;
	}
	if (!*o->name || !strcmp(o->out_dir, "/"))
		return snprintf(msg, cap, "cannot name a dataset after '%s'; use --name", o->out_dir),
		       -EINVAL;
	if ((c->groups & CMD_TOKENS) &&
	    (o->tok_dtype == FEED_DTYPE_INVALID || !o->seq_len == !o->doc_sep_set))
		return snprintf(msg, cap, "tokens needs --dtype and one of --seq-len, --doc-sep"),
		       -EINVAL;
	if ((c->groups & CMD_TOKENS) && o->vocab_size && !o->doc_sep_set)
		return snprintf(msg, cap, "--vocab-size goes with --doc-sep"), -EINVAL;
	return 0;
}

/* Parses argv (argv[0] is the command name). Returns 0, 1 for --help, or
 * -EINVAL with msg set. */
static int parse_args(const struct pack_cmd *c, int argc, char **argv, struct pack_opts *o,
		      char *msg, size_t cap)
{
	int opt;

	opterr = 0;
	optind = 1;
	while ((opt = getopt_long(argc, argv, ":o:h", pack_long_opts, NULL)) != -1) {
		if (opt == 'h')
			return 1;
		if (opt == '?' || opt == ':') {
			const char *bad = argv[optind - 1];
			snprintf(msg, cap, opt == '?' ? "unknown option '%s'" : "option '%s' needs a value",
				 bad);
			return -EINVAL;
		}
		if (!opt_allowed(opt, c->groups))
			return snprintf(msg, cap, "%s takes no option '%s'", c->name, argv[optind - 1]),
			       -EINVAL;
		if (apply_opt(o, opt, optarg, msg, cap) < 0)
			return -EINVAL;
	}
	o->npos = argc - optind;
	o->pos = argv + optind;
	if (o->npos < c->min_pos || (c->max_pos >= 0 && o->npos > c->max_pos))
		return snprintf(msg, cap, "%s: wrong number of arguments", c->name), -EINVAL;
	return finish_opts(o, c, msg, cap);
}

static const struct pack_cmd *find_cmd(const char *name)
{
	for (size_t i = 0; i < PACK_NCMDS; i++)
		if (!strcmp(pack_cmds[i].name, name))
			return &pack_cmds[i];
	return NULL;
}

int main(int argc, char **argv)
{
	struct pack_opts *o;
	struct feed_err err = {0};
	char msg[512] = "";
	const struct pack_cmd *c;
	int rc;

	if (argc < 2)
		return usage_error(NULL, "missing command");
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help"))
		return usage_main(stdout), 0;
	if (!strcmp(argv[1], "wds"))
		return pack_wds_main(argc - 1, argv + 1);
	if (!(c = find_cmd(argv[1]))) {
		snprintf(msg, sizeof(msg), "unknown command '%s'", argv[1]);
		return usage_error(NULL, msg);
	}
	if (!(o = calloc(1, sizeof(*o))))
		return fprintf(stderr, "feedpack: out of memory\n"), 1;
	o->level = 3;
	o->block_bytes = 64 * 1024;
	rc = parse_args(c, argc - 1, argv + 1, o, msg, sizeof(msg));
	if (rc == 1) {
		usage_cmd(c);
		rc = 0;
	} else if (rc < 0) {
		rc = usage_error(c, msg);
	} else {
		rc = c->run(o, &err);
		if (rc == -PACK_EUSAGE)
			rc = usage_error(c, err.msg);
		else if (rc < 0)
			rc = (fprintf(stderr, "feedpack: %s\n", err.msg), 1);
	}
	free(o);
	return rc;
}
