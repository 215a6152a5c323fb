/* SPDX-License-Identifier: Apache-2.0 */
/* util.c - the leaf helpers of server/: byte buffers and peer addresses as
 * text.  They call nothing of server/ but arena.c's payload free list, so
 * any file may use them without an arrow back up. */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>

#include "srv.h"

void srv_buf_free(struct srv_buf *b)
{
	free(b->data);
	srv_payload_put(b->payload);
	b->data = NULL;
	b->payload = NULL;
	b->len = b->cap = 0;
}

const char *srv_addr_str(const struct sockaddr_storage *peer, bool with_port, char *buf,
			 size_t len)
{
	char host[INET6_ADDRSTRLEN] = "?";
	unsigned port = 0;
	bool v6 = false;

	if (peer->ss_family == AF_INET) {
		const struct sockaddr_in *sin = (const struct sockaddr_in *)peer;
		inet_ntop(AF_INET, &sin->sin_addr, host, sizeof(host));
		port = ntohs(sin->sin_port);
	} else if (peer->ss_family == AF_INET6) {
		const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)peer;
		port = ntohs(sin6->sin6_port);
		if (IN6_IS_ADDR_V4MAPPED(&sin6->sin6_addr)) {
			inet_ntop(AF_INET, &sin6->sin6_addr.s6_addr[12], host,
				  sizeof(host));
		} else {
			inet_ntop(AF_INET6, &sin6->sin6_addr, host, sizeof(host));
			v6 = true;
		}
	}
	if (!with_port)
		snprintf(buf, len, "%s", host);
	else if (v6)
		snprintf(buf, len, "[%s]:%u", host, port);
	else
		snprintf(buf, len, "%s:%u", host, port);
	return buf;
}

bool srv_same_addr(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
	const struct sockaddr_in *a4 = (const void *)a, *b4 = (const void *)b;
	const struct sockaddr_in6 *a6 = (const void *)a, *b6 = (const void *)b;

	if (a->ss_family != b->ss_family)
		return false;
	if (a->ss_family == AF_INET)
		return a4->sin_addr.s_addr == b4->sin_addr.s_addr;
	return memcmp(&a6->sin6_addr, &b6->sin6_addr, sizeof(a6->sin6_addr)) == 0;
}
