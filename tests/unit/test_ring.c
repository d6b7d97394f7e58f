/* test_ring.c: the base FIFO (decoder/ring): order kept across growth while the front has wrapped
 * round the array, pops, zeroed pushes. (The queues built on it are tested where they are used:
 * progress in test_rules.c, the Kafka sink's in the integration tests.) */
#include "decoder/base/ring.h"

#include <stdbool.h>
#include <stdint.h>

#include "test.h"

/* Pushes and pops in a pattern that wraps the front round the array before every growth. */
static void test_order_across_growth(void)
{
	ring r = RING_INIT(uint64_t);
	uint64_t next_in = 0, next_out = 0;
	for (int round = 0; round < 12; round++) {
		for (int i = 0; i < 50 + round * 37; i++)
			*(uint64_t *)ring_push(&r) = next_in++;
		size_t n = r.len / 2 + 1;
		bool ordered = true;
		for (size_t i = 0; i < r.len; i++)
			ordered &= *(uint64_t *)ring_at(&r, i) == next_out + i;
		CHECK(ordered);
		ring_pop(&r, n);
		next_out += n;
		CHECK_INT(r.len, next_in - next_out);
		CHECK((r.cap & (r.cap - 1)) == 0);
	}
	CHECK_INT(*(uint64_t *)ring_push(&r), 0); /* a pushed element is zeroed */
	ring_clear(&r);
	CHECK_INT(r.len, 0);
	ring_free(&r);
	CHECK(r.v == NULL && r.size == sizeof(uint64_t));
}

int main(void)
{
	test_order_across_growth();
	return TEST_SUMMARY("test_ring");
}
