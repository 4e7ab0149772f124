/*
 * check_client_elf.c: reads build/lib/libfeedclient.so as an ELF file and
 * checks the promise of DESIGN.md: it needs no libuv, zstd, YAML or
 * systemd library (its NEEDED entries), and it exports feed_* and nothing
 * else (its defined dynamic symbols); and neither it nor build/bin/feedd
 * needs a CUDA library or symbol at load time (both dlopen the driver).
 */
#include <check.h>
#include <elf.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static uint8_t *img;
static size_t img_len;

static const char *img_name = "libfeedclient.so";

static void load_file(const char *env, const char *file)
{
	const char *dir = getenv(env);
	char path[512];
	struct stat st;

	ck_assert_msg(dir != NULL, "%s is not set (ctest sets it)", env);
	snprintf(path, sizeof(path), "%s/%s", dir, file);
	img_name = file;
	int fd = open(path, O_RDONLY);
	ck_assert_msg(fd >= 0, "cannot open %s", path);
	ck_assert_int_eq(fstat(fd, &st), 0);
	img_len = (size_t)st.st_size;
	img = malloc(img_len);
	ck_assert_int_eq(read(fd, img, img_len), (ssize_t)img_len);
	close(fd);
	const Elf64_Ehdr *eh = (const Elf64_Ehdr *)img;
	ck_assert_int_eq(memcmp(eh->e_ident, ELFMAG, SELFMAG), 0);
	ck_assert_int_eq(eh->e_ident[EI_CLASS], ELFCLASS64);
	ck_assert_uint_le(eh->e_shoff + (size_t)eh->e_shnum * sizeof(Elf64_Shdr), img_len);
}

static void load(void)
{
	load_file("FEED_LIB", "libfeedclient.so");
}

static void load_feedd(void)
{
	load_file("FEED_BIN", "feedd");
}

static const Elf64_Shdr *section(uint32_t type)
{
	const Elf64_Ehdr *eh = (const Elf64_Ehdr *)img;
	const Elf64_Shdr *sh = (const Elf64_Shdr *)(img + eh->e_shoff);

	for (unsigned i = 0; i < eh->e_shnum; i++)
		if (sh[i].sh_type == type) {
			ck_assert_uint_le(sh[i].sh_offset + sh[i].sh_size, img_len);
			return &sh[i];
		}
	return NULL;
}

static const char *strtab_of(const Elf64_Shdr *s)
{
	const Elf64_Ehdr *eh = (const Elf64_Ehdr *)img;
	const Elf64_Shdr *sh = (const Elf64_Shdr *)(img + eh->e_shoff);
	ck_assert_uint_lt(s->sh_link, eh->e_shnum);
	return (const char *)(img + sh[s->sh_link].sh_offset);
}

START_TEST(test_client_elf_needed)
{
	static const char *const forbidden[] = {"libuv", "libzstd", "libyaml", "libcyaml",
						"libsystemd", "libxxhash",
						/* CUDA (libcuda, libcudart): the driver is
						 * dlopen()ed at run time */
						"libcuda", "libnvrtc", "libnvidia"};
	const Elf64_Shdr *dyn = section(SHT_DYNAMIC);
	bool has_protobuf = false;

	ck_assert_ptr_nonnull(dyn);
	const char *str = strtab_of(dyn);
	const Elf64_Dyn *d = (const Elf64_Dyn *)(img + dyn->sh_offset);
	for (size_t i = 0; i < dyn->sh_size / sizeof(*d) && d[i].d_tag != DT_NULL; i++) {
		if (d[i].d_tag != DT_NEEDED)
			continue;
		const char *name = str + d[i].d_un.d_val;
		for (size_t k = 0; k < sizeof(forbidden) / sizeof(forbidden[0]); k++)
			ck_assert_msg(strncmp(name, forbidden[k], strlen(forbidden[k])),
				      "libfeedclient.so needs %s", name);
		has_protobuf |= !strncmp(name, "libprotobuf-c", 13);
	}
	ck_assert_msg(has_protobuf, "NEEDED entries not found (or protobuf-c missing)");
	free(img);
}
END_TEST

START_TEST(test_client_elf_exports)
{
	const Elf64_Shdr *sym = section(SHT_DYNSYM);
	int feed = 0;

	ck_assert_ptr_nonnull(sym);
	const char *str = strtab_of(sym);
	const Elf64_Sym *s = (const Elf64_Sym *)(img + sym->sh_offset);
	for (size_t i = 1; i < sym->sh_size / sizeof(*s); i++) {
		int bind = ELF64_ST_BIND(s[i].st_info), type = ELF64_ST_TYPE(s[i].st_info);
		if (s[i].st_shndx == SHN_UNDEF || bind == STB_LOCAL ||
		    (type != STT_FUNC && type != STT_OBJECT))
			continue;
		const char *name = str + s[i].st_name;
		if (!strncmp(name, "__asan", 6) || !strncmp(name, "__ubsan", 7) ||
		    !strncmp(name, "__odr_asan", 10))
			continue;  /* sanitizer builds add their own */
		if (s[i].st_shndx == SHN_ABS && !strncmp(name, "FEEDCLIENT_", 11))
			continue;  /* GNU ld's symbol naming a version node of feedclient.map */
		ck_assert_msg(!strncmp(name, "feed_", 5), "libfeedclient.so exports %s", name);
		feed++;
	}
	ck_assert_int_ge(feed, 10);
	free(img);
}
END_TEST

/* No undefined CUDA symbol (cu* driver or cuda* runtime calls) either: one
 * would need a CUDA library at load time on every node, GPU or not. */
START_TEST(test_client_elf_no_cuda_symbols)
{
	const Elf64_Shdr *sym = section(SHT_DYNSYM);
	bool has_dlopen = false;

	ck_assert_ptr_nonnull(sym);
	const char *str = strtab_of(sym);
	const Elf64_Sym *s = (const Elf64_Sym *)(img + sym->sh_offset);
	for (size_t i = 1; i < sym->sh_size / sizeof(*s); i++) {
		const char *name = str + s[i].st_name;
		if (s[i].st_shndx != SHN_UNDEF)
			continue;
		ck_assert_msg(strncmp(name, "cuda", 4) && !(name[0] == 'c' && name[1] == 'u' &&
							  name[2] >= 'A' && name[2] <= 'Z'),
			      "%s needs %s at load time", img_name, name);
		has_dlopen |= !strcmp(name, "dlopen") || !strncmp(name, "dlopen@", 7);
	}
	ck_assert_msg(has_dlopen, "%s does not dlopen (the driver) at all", img_name);
	free(img);
}
END_TEST

/* feedd, which owns device slots for CUDA IPC, loads the driver at run
 * time as the client does: no CUDA library among its NEEDED entries. */
START_TEST(test_feedd_elf_needs_no_cuda)
{
	static const char *const forbidden[] = {"libcuda", "libcudart", "libnvrtc", "libnvidia"};
	const Elf64_Shdr *dyn = section(SHT_DYNAMIC);
	int needed = 0;

	ck_assert_ptr_nonnull(dyn);
	const char *str = strtab_of(dyn);
	const Elf64_Dyn *d = (const Elf64_Dyn *)(img + dyn->sh_offset);
	for (size_t i = 0; i < dyn->sh_size / sizeof(*d) && d[i].d_tag != DT_NULL; i++) {
		if (d[i].d_tag != DT_NEEDED)
			continue;
		const char *name = str + d[i].d_un.d_val;
		for (size_t k = 0; k < sizeof(forbidden) / sizeof(forbidden[0]); k++)
			ck_assert_msg(strncmp(name, forbidden[k], strlen(forbidden[k])),
				      "feedd needs %s", name);
		needed++;
	}
	ck_assert_int_gt(needed, 0);
	free(img);
}
END_TEST

static Suite *elf_suite(void)
{
	Suite *s = suite_create("client_elf");
	TCase *tc = tcase_create("client_elf");

	tcase_add_checked_fixture(tc, load, NULL);
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_client_elf_needed);
	tcase_add_test(tc, test_client_elf_exports);
	tcase_add_test(tc, test_client_elf_no_cuda_symbols);
	suite_add_tcase(s, tc);
	TCase *td = tcase_create("feedd_elf");
	tcase_add_checked_fixture(td, load_feedd, NULL);
	tcase_set_timeout(td, 30);
	tcase_add_test(td, test_feedd_elf_needs_no_cuda);
	tcase_add_test(td, test_client_elf_no_cuda_symbols);
	suite_add_tcase(s, td);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(elf_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
