/*
 * mem.c: memory registration.
 *
 * The lab's NIC can only reach memory the process shares with it as a
 * memfd, while programs register whatever they allocated (malloc,
 * memalign, their stack). ibv_reg_mr therefore replaces the registered
 * pages in place: one sparse memfd stands for the whole address space
 * (offset = virtual address); the pages' current bytes are copied into it
 * at their own offsets and the pages are remapped MAP_SHARED|MAP_FIXED from
 * it. The program keeps the same addresses and the same bytes; the lab maps
 * the same memfd range. The region is registered with REG_MR_AT at the
 * program's own address (its iova), so the addresses a program sends to
 * its peers are the ones their NICs use, as on hardware.
 *
 * Pages stay memfd-backed while any live region covers them; a page that a
 * new registration finds uncovered is copied and remapped again (it may be
 * fresh memory at a reused address). Consequences, documented in README.md:
 * memory of deregistered regions stays in the memfd until the process
 * exits, and registered pages are shared, not copied-on-write, across
 * fork().
 */
#include "mrv.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <fcntl.h>

#define PAGE 4096ULL
#define SPACE (1ULL << 47) /* the user address space on x86-64 */

static int memfd = -1;
static struct mrv_mr *live; /* registered regions */

static int ensure_memfd(void) {
	if (memfd >= 0)
		return 0;
	int fd = memfd_create("mrlab-ibverbs", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return errno;
	if (ftruncate(fd, SPACE) < 0 || fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) < 0) {
		int e = errno;
		close(fd);
		return e;
	}
	memfd = fd;
	return 0;
}

/* share makes [s, e) (page-aligned) memfd-backed, page ranges that a live
 * region covers already excepted. */
static int share(uint64_t s, uint64_t e) {
	while (s < e) {
		/* Skip what a live region covers; else find how far the gap goes. */
		uint64_t next = e;
		int covered = 0;
		for (struct mrv_mr *m = live; m; m = m->next) {
			if (m->start <= s && s < m->end) {
				covered = 1;
				s = m->end;
				break;
			}
			if (m->start > s && m->start < next)
				next = m->start;
		}
		if (covered)
			continue;
		size_t n = next - s;
		/* pwrite reads the current bytes (EFAULT for unmapped memory,
		 * as ibv_reg_mr fails on it). */
		for (size_t done = 0; done < n;) {
			ssize_t w = pwrite(memfd, (void *)(uintptr_t)(s + done), n - done, (off_t)(s + done));
			if (w < 0) {
				if (errno == EINTR)
					continue;
				return errno;
			}
			done += (size_t)w;
		}
		if (mmap((void *)(uintptr_t)s, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, memfd, (off_t)s) == MAP_FAILED)
			return errno;
		s = next;
	}
	return 0;
}

static struct ibv_mr *reg(struct ibv_pd *pd, void *addr, size_t len, uint64_t iova, unsigned access) {
	struct mrv_pd *p = (struct mrv_pd *)pd;
	uint64_t a = (uintptr_t)addr;
	if (len == 0 || a + len < a || a + len > SPACE) {
		errno = EINVAL;
		return NULL;
	}
	if (access & ~(unsigned)(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
				 IBV_ACCESS_RELAXED_ORDERING | IBV_ACCESS_OPTIONAL_RANGE)) {
		/* atomics, memory windows, zero-based, on-demand paging */
		mrv_log("ibv_reg_mr: access flags %#x not supported", access);
		errno = EOPNOTSUPP;
		return NULL;
	}
	if ((access & IBV_ACCESS_REMOTE_WRITE) && !(access & IBV_ACCESS_LOCAL_WRITE)) {
		errno = EINVAL;
		return NULL;
	}
	struct mrv_mr *m = calloc(1, sizeof *m);
	if (!m) {
		errno = ENOMEM;
		return NULL;
	}
	m->start = a & ~(PAGE - 1);
	m->end = (a + len + PAGE - 1) & ~(PAGE - 1);
	pthread_mutex_lock(&mrv_s.mu);
	int e = ensure_memfd();
	if (!e)
		e = share(m->start, m->end);
	uint32_t st = MV_OK;
	struct mv_reg_mr_reply r;
	if (!e) {
		struct mv_reg_mr_at q = {p->h, access & 7, a, len, iova};
		st = mrv_call(MV_REG_MR_AT, &q, sizeof q, memfd, &r, sizeof r, NULL);
		e = mrv_errno(st);
	}
	if (!e) {
		m->next = live;
		live = m;
	}
	pthread_mutex_unlock(&mrv_s.mu);
	if (e) {
		free(m);
		errno = e;
		return NULL;
	}
	m->mr.context = pd->context;
	m->mr.pd = pd;
	m->mr.addr = addr;
	m->mr.length = len;
	m->mr.handle = r.lkey;
	m->mr.lkey = r.lkey;
	m->mr.rkey = r.rkey;
	return &m->mr;
}

struct ibv_mr *reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access) {
	return reg(pd, addr, len, (uintptr_t)addr, (unsigned)access);
}
MRV_EXPORT(reg_mr, ibv_reg_mr, "IBVERBS_1.1");

struct ibv_mr *reg_mr_iova(struct ibv_pd *pd, void *addr, size_t len, uint64_t iova, int access) {
	return reg(pd, addr, len, iova, (unsigned)access);
}
MRV_EXPORT(reg_mr_iova, ibv_reg_mr_iova, "IBVERBS_1.7");

struct ibv_mr *reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t len, uint64_t iova, unsigned access) {
	return reg(pd, addr, len, iova, access);
}
MRV_EXPORT(reg_mr_iova2, ibv_reg_mr_iova2, "IBVERBS_1.8");

struct ibv_mr *reg_dmabuf_mr(struct ibv_pd *pd, uint64_t off, size_t len, uint64_t iova, int fd, int access) {
	(void)pd, (void)off, (void)len, (void)iova, (void)fd, (void)access;
	errno = EOPNOTSUPP;
	return NULL;
}
MRV_EXPORT(reg_dmabuf_mr, ibv_reg_dmabuf_mr, "IBVERBS_1.12");

int dereg_mr(struct ibv_mr *mr) {
	struct mrv_mr *m = (struct mrv_mr *)mr;
	struct mv_handle q = {mr->lkey, 0};
	pthread_mutex_lock(&mrv_s.mu);
	uint32_t st = mrv_call(MV_DEREG_MR, &q, sizeof q, -1, NULL, 0, NULL);
	if (st == MV_OK)
		for (struct mrv_mr **pp = &live; *pp; pp = &(*pp)->next)
			if (*pp == m) {
				*pp = m->next;
				break;
			}
	pthread_mutex_unlock(&mrv_s.mu);
	if (st != MV_OK)
		return mrv_errno(st);
	free(m);
	return 0;
}
MRV_EXPORT(dereg_mr, ibv_dereg_mr, "IBVERBS_1.1");
