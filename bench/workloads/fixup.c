/*
 * The W-write "fixup" phase: write a 1 MiB file as 256 sequential 4 KiB
 * write()s, patch it with 100 scattered 4-byte pwrite()s, close() it. The
 * pattern is a pure function of the offsets so that the benchmark can
 * compute the expected checksum itself (bench/suite/workloads.go mirrors
 * it: keep the two in step).
 *
 * usage: fixup FILE
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define BLOCK 4096
#define BLOCKS 256
#define PATCHES 100

static int full_write(int fd, const unsigned char *p, size_t n, const char *path) {
	while (n > 0) {
		ssize_t k = write(fd, p, n);
		if (k < 0) {
			if (errno == EINTR)
				continue;
			fprintf(stderr, "fixup: write %s: %s\n", path, strerror(errno));
			return -1;
		}
		p += k;
		n -= (size_t)k;
	}
	return 0;
}

int main(int argc, char **argv) {
	if (argc != 2) {
		fprintf(stderr, "usage: fixup FILE\n");
		return 2;
	}
	const char *path = argv[1];
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0) {
		fprintf(stderr, "fixup: open %s: %s\n", path, strerror(errno));
		return 1;
	}
	unsigned char buf[BLOCK];
	for (uint32_t b = 0; b < BLOCKS; b++) {
		for (uint32_t j = 0; j < BLOCK; j++)
			buf[j] = (unsigned char)(b * 7u + j * 31u);
		if (full_write(fd, buf, BLOCK, path) < 0)
			return 1;
	}
	const uint32_t size = BLOCK * BLOCKS;
	for (uint32_t k = 0; k < PATCHES; k++) {
		/* Knuth's multiplicative hash scatters the patches over the file. */
		uint32_t off = (uint32_t)((k + 1u) * 2654435761u) % (size - 4u);
		unsigned char patch[4] = {0xde, 0xad, (unsigned char)k, (unsigned char)(k ^ 0xffu)};
		ssize_t n = pwrite(fd, patch, sizeof patch, off);
		if (n != (ssize_t)sizeof patch) {
			fprintf(stderr, "fixup: pwrite %s at %u: %zd, %s\n", path, off, n, strerror(errno));
			return 1;
		}
	}
	if (close(fd) != 0) {
		fprintf(stderr, "fixup: close %s: %s\n", path, strerror(errno));
		return 1;
	}
	return 0;
}
