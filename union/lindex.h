/* SPDX-License-Identifier: Apache-2.0 */
/* lindex.h - the layer identity index (lindex.c): every path of a read-only
 * layer numbered once, in a file of its own, so that the identity of an
 * object belongs to the layer and not to one server's state dir.
 *
 * Private to the engine: its one user is node matching (node.c, lookup.c),
 * and an object number never leaves the engine (a client sees node ids).
 * It includes nothing of un_private.h, so a test or a bench includes it alone.
 *
 * Object numbers ("objnums") are per lineage: two indexes of one lineage
 * give one path the same objnum when it is the same object (lindex.c, rule
 * 4); a fresh build's lineage is a hash of the layer's listing, so copies of
 * one layer indexed anywhere agree without talking to one another.
 *
 * Every function returns 0 or a negative errno: -ENOENT for an unknown
 * objnum or name, -EPROTO for a file that is not an index of a format this
 * code reads (garbage, truncated, an unknown version, a bad record).
 */
#ifndef UN_LINDEX_H
#define UN_LINDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define UN_LX_ROOT	   1  /* the objnum of the layer's root */
#define UN_LX_DIGEST_BYTES 16 /* BLAKE2b-128 */
#define UN_LX_NAME_MAX	   255

/* Build flags. */
enum {
	/* Hash each regular file's bytes, so that a version of the layer
	 * rebuilt bit-identically (new mtimes) inherits its objnums.  Reads
	 * the whole layer. */
	UN_LX_DIGESTS = 1u << 0,
};

struct un_lx;

struct un_lx_info {
	uint64_t lineage;
	uint32_t generation; /* 1 for a fresh build, the parent's + 1 after */
	uint64_t max_objnum; /* never reused within the lineage */
	uint64_t count;	     /* paths, the root included */
	bool digests;	     /* UN_LX_DIGESTS was given */
	/* The index this one inherited from; generation 0: a fresh build. */
	uint64_t from_lineage;
	uint32_t from_generation;
	/* A hash of the listing (what a fresh build's lineage is made of):
	 * equal for two layers with equal content, however numbered. */
	uint8_t listing[UN_LX_DIGEST_BYTES];
	/* This index's place in its lineage: a fresh build's is its listing,
	 * an inherited one's hashes FROM's id with its own listing.  Copies of
	 * one image updated apart share a lineage but not ids: FROM_ID tells
	 * whether an index descends from the one a server knows. */
	uint8_t id[UN_LX_DIGEST_BYTES];
	uint8_t from_id[UN_LX_DIGEST_BYTES]; /* zeros for a fresh build */
	/* The inode number of the root the index was built on (lindex.c rule
	 * 8): another directory at the layer's path has another one. */
	uint64_t root_ino;
};

/* One path of the layer, as indexed. */
struct un_lx_entry {
	uint64_t objnum;
	uint64_t parent; /* 0 for the root */
	/* The objnum of the first path in walk order of the same inode: the
	 * entry's own objnum unless it is a later link of an inode with
	 * several names in the layer. */
	uint64_t leader;
	uint32_t type; /* S_IFMT bits */
	uint64_t size;
	int64_t mtime_sec;
	uint32_t mtime_nsec;
	uint64_t rdev;
	/* Symlink: of its target, always.  Regular file: of its bytes when
	 * the index was built with UN_LX_DIGESTS.  Otherwise zeros. */
	uint8_t digest[UN_LX_DIGEST_BYTES];
	uint16_t namelen;
	char name[UN_LX_NAME_MAX + 1]; /* NUL-terminated; "" for the root */
};

/* Indexes the layer whose root is the directory ROOT_FD into a new file
 * OUT_PATH (outside the layer; an existing file there is replaced
 * atomically).  FROM NULL: a fresh build.  FROM an open index of an earlier
 * version of the layer: the new index keeps its lineage and the objnums of
 * the paths that are the same objects.  On failure nothing is left at
 * OUT_PATH that was not there before, and ERR (ERRLEN bytes, may be NULL)
 * gets one line naming the path and the cause. */
int un_lx_build(int root_fd, struct un_lx *from, const char *out_path, unsigned flags,
		char *err, size_t errlen);

/* Opens the index file PATH for reading; *OUT is NULL on failure. */
int un_lx_open(const char *path, struct un_lx **out);
void un_lx_close(struct un_lx *lx);
void un_lx_info(const struct un_lx *lx, struct un_lx_info *out);

/* The entry NAME of directory PARENT, and the entry of OBJNUM.  Each call
 * is one read transaction of its own: any number of threads may call them
 * on one handle at once. */
int un_lx_lookup(struct un_lx *lx, uint64_t parent, const char *name,
		 struct un_lx_entry *out);
int un_lx_get(struct un_lx *lx, uint64_t objnum, struct un_lx_entry *out);
/* The inode INO of the root's device in the directory the index was built
 * on (lindex.c rule 8): the objnum of its link leader (the first of its
 * paths in walk order) and its type (S_IFMT bits); -ENOENT for an inode the
 * index does not know (added to the layer since, or on another device). */
int un_lx_ino(struct un_lx *lx, uint64_t ino, uint64_t *objnum, uint32_t *type);

#endif
