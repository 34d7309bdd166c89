/* SPDX-License-Identifier: MIT */
/*
 * tests/api/test_header.c - the public headers compile alone in C (this
 * file includes nothing before <kvslab/fault.h>, which must bring what it
 * uses from <kvslab/drv.h> itself; then the umbrella header) and in C++
 * (test_header_cxx.cc), and the version macros agree with the package.
 */
#include <kvslab/fault.h>

#include <kvslab.h>

#include <check.h>
#include <stdlib.h>
#include <string.h>

int kvs_cxx_header_ok(void);
int kvs_cxx_fault_ok(void);

START_TEST(test_header_c_and_cxx)
{
	ck_assert_int_eq(kvs_cxx_header_ok(), (int)sizeof(kvs_drv_attr_t));
	ck_assert_str_eq(KVSLAB_VERSION_STRING, PACKAGE_VERSION);
	ck_assert_int_ge(sizeof(kvs_devptr_t), 8);
	/* The fault API is reachable from its own header, and answers a
	 * driver that is not a wrapper as its page says. */
	ck_assert_uint_eq(kvs_fault_calls(NULL, KVS_OP_ANY), 0);
	ck_assert_int_eq(kvs_cxx_fault_ok(), KVS_OP__COUNT);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("header");
	TCase *tc = tcase_create("compile");
	SRunner *sr;
	int failed;

	tcase_add_test(tc, test_header_c_and_cxx);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
