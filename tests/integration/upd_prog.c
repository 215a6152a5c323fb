/* SPDX-License-Identifier: Apache-2.0 */
/* upd_prog.c - the program kvm_update.sh's guest runs from the union's lower
 * layer while the layer is replaced by a new version (built static twice, with
 * VER 1 and 2, so the two files differ only in their version bytes).
 *
 * Its data is BLOB: 1,024 pages of 4 KiB in the file's read-only data, each
 * starting with the version and its page number, so a page read from the
 * wrong version of the file (mixed pages) is seen.  The kernel reads a
 * page of a running program from the server only when it is first touched
 * (or again after the page cache dropped it), through the file handle the
 * program was started from.
 *
 *   upd_prog once     touches every page: "once v=V ok", or "once v=V BAD
 *                     page P" (exit 1)
 *   upd_prog serve F  touches the first half, prints "serve v=V half ok",
 *                     waits until file F exists (the guest makes it after
 *                     the update and a drop of the page cache), touches
 *                     the second half, prints "serve v=V all ok" (or BAD)
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#ifndef VER
#error "build with -DVER=1 or -DVER=2"
#endif

enum { PAGE = 4096, PAGES = 1024 };

#define P1(i)	 [(i)*PAGE] = VER, [(i)*PAGE + 1] = (unsigned char)(i),
#define P4(i)	 P1(i) P1((i) + 1) P1((i) + 2) P1((i) + 3)
#define P16(i)	 P4(i) P4((i) + 4) P4((i) + 8) P4((i) + 12)
#define P64(i)	 P16(i) P16((i) + 16) P16((i) + 32) P16((i) + 48)
#define P256(i)	 P64(i) P64((i) + 64) P64((i) + 128) P64((i) + 192)
#define P1024(i) P256(i) P256((i) + 256) P256((i) + 512) P256((i) + 768)

static const unsigned char BLOB[PAGES * PAGE] = {P1024(0)};

/* check: pages [FROM, TO) of BLOB; the first bad page, or -1 */
static int check(int from, int to)
{
	const volatile unsigned char *b = BLOB; /* real loads, not folded */

	for (int p = from; p < to; p++)
		if (b[p * PAGE] != VER || b[p * PAGE + 1] != (unsigned char)p)
			return p;
	return -1;
}

static int report(const char *what, const char *part, int bad)
{
	if (bad < 0)
		printf("%s v=%d%s%s ok\n", what, VER, *part ? " " : "", part);
	else
		printf("%s v=%d BAD page %d (v=%d)\n", what, VER, bad, BLOB[bad * PAGE]);
	fflush(stdout);
	return bad < 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
	if (argc == 2 && strcmp(argv[1], "once") == 0)
		return report("once", "", check(0, PAGES));
	if (argc == 3 && strcmp(argv[1], "serve") == 0) {
		if (report("serve", "half", check(0, PAGES / 2)))
			return 1;
		while (access(argv[2], F_OK) != 0)
			usleep(100000);
		return report("serve", "all", check(PAGES / 2, PAGES));
	}
	fprintf(stderr, "usage: upd_prog once | serve FILE\n");
	return 2;
}
