/* SPDX-License-Identifier: Apache-2.0 */
/* util.c - the leaf helpers of server/: byte buffers and peer addresses as
 * text.  They call nothing of server/ but arena.c's payload free list, so
 * any file may use them without an arrow back up. */
#define _GNU_SOURCE /* struct in6_pktinfo */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport.h"

void rpc_buf_free(struct rpc_buf *b)
{
	free(b->data);
	rpc_payload_put(b->payload);
	b->data = NULL;
	b->payload = NULL;
	b->len = b->cap = 0;
}

const char *rpc_addr_str(const struct sockaddr_storage *peer, bool with_port, char *buf,
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

bool rpc_same_addr(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
	const struct sockaddr_in *a4 = (const void *)a, *b4 = (const void *)b;
	const struct sockaddr_in6 *a6 = (const void *)a, *b6 = (const void *)b;

	if (a->ss_family != b->ss_family)
		return false;
	if (a->ss_family == AF_INET)
		return a4->sin_addr.s_addr == b4->sin_addr.s_addr;
	return memcmp(&a6->sin6_addr, &b6->sin6_addr, sizeof(a6->sin6_addr)) == 0;
}

bool rpc_addr_port_parse(const char *text, struct sockaddr_storage *out)
{
	struct sockaddr_storage ss = {0};
	struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
	const char *colon = strrchr(text, ':');
	char host[INET6_ADDRSTRLEN + 2], *end;
	size_t hl;
	unsigned long port;

	if (!colon || colon == text)
		return false;
	hl = (size_t)(colon - text);
	if (hl >= sizeof(host))
		return false;
	memcpy(host, text, hl);
	host[hl] = '\0';
	errno = 0;
	port = strtoul(colon + 1, &end, 10);
	if (errno || *end || end == colon + 1 || port > 65535)
		return false;
	if (host[0] == '[' && host[hl - 1] == ']') {
		host[hl - 1] = '\0';
		if (inet_pton(AF_INET6, host + 1, &s6->sin6_addr) != 1)
			return false;
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons((uint16_t)port);
	} else if (inet_pton(AF_INET, host, &s4->sin_addr) == 1) {
		s4->sin_family = AF_INET;
		s4->sin_port = htons((uint16_t)port);
	} else {
		return false;
	}
	if (out)
		*out = ss;
	return true;
}

/* ---- datagrams: the address they came to and leave from ---- */

void rpc_udp_want_local(int fd, int family)
{
	int one = 1;

	/* A v6 socket carries v4 datagrams (v4-mapped) too: it needs both. */
	setsockopt(fd, IPPROTO_IP, IP_PKTINFO, &one, sizeof(one));
	if (family == AF_INET6)
		setsockopt(fd, IPPROTO_IPV6, IPV6_RECVPKTINFO, &one, sizeof(one));
}

void rpc_udp_local(struct msghdr *msg, struct sockaddr_storage *out)
{
	memset(out, 0, sizeof(*out));
	for (struct cmsghdr *c = CMSG_FIRSTHDR(msg); c; c = CMSG_NXTHDR(msg, c)) {
		if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_PKTINFO) {
			struct in_pktinfo pi;
			struct sockaddr_in *sin = (struct sockaddr_in *)out;

			memcpy(&pi, CMSG_DATA(c), sizeof(pi));
			sin->sin_family = AF_INET;
			sin->sin_addr = pi.ipi_addr;
			return;
		}
		if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_PKTINFO) {
			struct in6_pktinfo pi;
			struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)out;

			memcpy(&pi, CMSG_DATA(c), sizeof(pi));
			sin6->sin6_family = AF_INET6;
			sin6->sin6_addr = pi.ipi6_addr;
			return;
		}
	}
}

void rpc_udp_send_from(struct msghdr *msg, const struct sockaddr_storage *local,
		       void *buf)
{
	struct cmsghdr *c;

	if (!local || local->ss_family == 0)
		return;
	msg->msg_control = buf;
	msg->msg_controllen = RPC_UDP_CMSG_SPACE;
	c = CMSG_FIRSTHDR(msg);
	if (local->ss_family == AF_INET) {
		struct in_pktinfo pi = {
		    .ipi_spec_dst = ((const struct sockaddr_in *)local)->sin_addr};

		c->cmsg_level = IPPROTO_IP;
		c->cmsg_type = IP_PKTINFO;
		c->cmsg_len = CMSG_LEN(sizeof(pi));
		memcpy(CMSG_DATA(c), &pi, sizeof(pi));
	} else {
		struct in6_pktinfo pi = {
		    .ipi6_addr = ((const struct sockaddr_in6 *)local)->sin6_addr};

		c->cmsg_level = IPPROTO_IPV6;
		c->cmsg_type = IPV6_PKTINFO;
		c->cmsg_len = CMSG_LEN(sizeof(pi));
		memcpy(CMSG_DATA(c), &pi, sizeof(pi));
	}
	msg->msg_controllen = c->cmsg_len;
}
