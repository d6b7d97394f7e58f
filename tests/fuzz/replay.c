/* replay.c: a main() for the libFuzzer harnesses without libFuzzer. It runs LLVMFuzzerTestOneInput
 * once on every file named, and on every file in every directory named, so that `make check` replays
 * the kept corpora (tests/fuzz/corpus/NAME) as regression tests with the ordinary compiler, and with
 * sanitizers under SANITIZE=... A harness reports a bug as it does under libFuzzer: by aborting. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Feeds one file to the harness; false if it cannot be read. */
static int run_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		perror(path);
		return 0;
	}
	size_t cap = 4096, n = 0;
	uint8_t *data = malloc(cap);
	size_t got;
	while ((got = fread(data + n, 1, cap - n, f)) > 0) {
		n += got;
		if (n == cap)
			data = realloc(data, cap *= 2);
	}
	int ok = !ferror(f);
	fclose(f);
	if (ok) {
		/* an exact-size copy, so that ASan sees a read past the input as it would under libFuzzer */
		uint8_t *exact = malloc(n ? n : 1);
		memcpy(exact, data, n);
		LLVMFuzzerTestOneInput(exact, n);
		free(exact);
	} else {
		perror(path);
	}
	free(data);
	return ok;
}

int main(int argc, char **argv)
{
	const char *name = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
	size_t passed = 0, failed = 0;
	if (argc < 2) {
		fprintf(stderr, "usage: %s FILE|DIR...\n", name);
		return 2;
	}
	for (int i = 1; i < argc; i++) {
		struct stat st;
		if (stat(argv[i], &st) != 0) {
			perror(argv[i]);
			failed++;
			continue;
		}
		if (!S_ISDIR(st.st_mode)) {
			run_file(argv[i]) ? passed++ : failed++;
			continue;
		}
		DIR *d = opendir(argv[i]);
		if (!d) {
			perror(argv[i]);
			failed++;
			continue;
		}
		char **files = NULL;
		size_t nfiles = 0;
		struct dirent *e;
		while ((e = readdir(d))) {
			if (e->d_name[0] == '.')
				continue;
			files = realloc(files, (nfiles + 1) * sizeof(*files));
			size_t len = strlen(argv[i]) + strlen(e->d_name) + 2;
			files[nfiles] = malloc(len);
			snprintf(files[nfiles++], len, "%s/%s", argv[i], e->d_name);
		}
		closedir(d);
		qsort(files, nfiles, sizeof(*files), cmp); /* the same order every run */
		for (size_t k = 0; k < nfiles; k++) {
			run_file(files[k]) ? passed++ : failed++;
			free(files[k]);
		}
		free(files);
	}
	if (!passed && !failed)
		failed++; /* an empty corpus replays nothing: say so */
	printf("%s: %zu passed, %zu failed\n", name, passed, failed);
	return failed ? 1 : 0;
}
