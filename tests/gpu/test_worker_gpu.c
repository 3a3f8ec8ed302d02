/* GPU test of the worker pipeline (make test-gpu): `kiln run`, i.e. the scheduler and a
 * worker with the GPU backend (texenc keeping several batches in flight), writes the same
 * files as the same job on the CPU backend, and reports the same mean PSNR (measured on
 * the GPU). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "common/fileio.h"
#include "kernels/gpu.h"
#include "kernels/png/png_file.h"
#include "tests/gpu/gpu_testutil.h"

Test(worker_gpu, kiln_run_on_the_gpu_writes_the_cpu_backends_files, .timeout = 600)
{
	gpu_test_require("worker_gpu");
	/* more images than one batch, with mips, through real shards */
	int rc = gpu_test_sh(NULL,
		 "$kiln samples -o $d/in; cp $data/kodak/*.png $d/in/; "
		 "for i in 1 2; do mkdir -p $d/in/copy$i; cp $data/kodak/kodim1*.png $d/in/copy$i/; done; "
		 "$kiln run -q --json --shard-size 8 --mipmaps --container ktx2 --device gpu --input $d/in --output $d/gpu > $d/gpu.json; "
		 "$kiln run -q --json --shard-size 8 --mipmaps --container ktx2 --device cpu --input $d/in --output $d/cpu > $d/cpu.json; "
		 "test $(find $d/gpu -name '*.ktx2' | wc -l) -eq $(find $d/in -name '*.png' | wc -l); "
		 "diff -r $d/cpu $d/gpu && "
		 "g=$(grep -o '\"psnr_mean_db\": *[0-9.]*' $d/gpu.json) && test -n \"$g\" && "
		 "test \"$g\" = \"$(grep -o '\"psnr_mean_db\": *[0-9.]*' $d/cpu.json)\"");
	cr_expect_eq(rc, 0, "kiln run on the GPU must write the same files as on the CPU, and measure the same PSNR "
			    "(on the GPU, kernels/texerr.h)");
}

/* The same with inputs in kiln's strip-parallel PNG layout, which the worker hands to the
 * GPU undecoded (GPU PNG decode inside the encode batches), next to ordinary files that
 * the decode threads take: the files are those of the CPU backend, and those of libpng
 * decoding on the GPU too. */
Test(worker_gpu, strip_pngs_decoded_on_the_gpu_give_the_cpu_backends_files, .timeout = 600)
{
	gpu_test_require("worker_gpu");
	char dir[] = "/tmp/kiln-wgpu-XXXXXX";
	cr_assert_not_null(mkdtemp(dir));
	char path[512];
	for (int i = 1; i <= 24; i++) {
		kiln_image img;
		test_kodak_path(path, sizeof path, i);
		cr_assert_eq(kiln_png_read_path(path, KILN_PNG_DECODER_LIBPNG, NULL, NULL, &img, NULL, 0), KILN_OK, "%s", path);
		snprintf(path, sizeof path, "%s/in/strips%02d.png", dir, i);
		if (i == 1) {
			char in[256];
			snprintf(in, sizeof in, "%s/in", dir);
			cr_assert_eq(kiln_mkdir_p(in), KILN_OK);
		}
		cr_assert_eq(kiln_png_write_path(path, &img, KILN_QUALITY_FAST), KILN_OK);
		kiln_image_free(&img);
	}
	int rc = gpu_test_sh(dir,
		 "cp $data/kodak/kodim0*.png $d/in/; "
		 "$kiln run -q --shard-size 8 --mipmaps --device gpu --input $d/in --output $d/gpu; "
		 "$kiln run -q --shard-size 8 --mipmaps --device gpu --png-decoder libpng --input $d/in --output $d/gpu-libpng; "
		 "$kiln run -q --shard-size 8 --mipmaps --device cpu --input $d/in --output $d/cpu; "
		 "test $(find $d/gpu -name '*.dds' | wc -l) -eq 33; "
		 "diff -r $d/cpu $d/gpu; diff -r $d/cpu $d/gpu-libpng");
	cr_expect_eq(rc, 0, "GPU-decoded strip PNGs must give the CPU backend's files");
}

/* `kiln encode --device gpu` hands kiln's strip-parallel files to the GPU undecoded and
 * decodes the rest on the host, in the same run: the textures are the CPU backend's, and
 * those of libpng decoding on the host. */
Test(worker_gpu, kiln_encode_on_the_gpu_decodes_strip_pngs_there_and_writes_the_cpus_files, .timeout = 600)
{
	gpu_test_require("worker_gpu");
	int rc = gpu_test_sh(NULL,
		 "mkdir -p $d/in; "
		 "$kiln encode -q --format png --quality fast $data/kodak/kodim1*.png -o $d/in/; "
		 "for f in $d/in/*.png; do mv $f $d/in/strips-$(basename $f); done; "
		 "cp $data/kodak/kodim0*.png $data/pngsuite/basn2c16.png $data/pngsuite/basi6a08.png $d/in/; "
		 "for fmt in 'bc1 --mipmaps' 'astc --quality fast'; do rm -rf $d/gpu $d/cpu $d/lib; "
		 "$kiln encode -q --format $fmt --batch 7 --device gpu $d/in/*.png -o $d/gpu/; "
		 "$kiln encode -q --format $fmt --batch 32 --device cpu $d/in/*.png -o $d/cpu/; "
		 "$kiln encode -q --format $fmt --device gpu --png-decoder libpng $d/in/*.png -o $d/lib/; "
		 "diff -r $d/cpu $d/gpu; diff -r $d/cpu $d/lib; done; "
		 "test $(ls $d/gpu | wc -l) -eq 21");
	cr_expect_eq(rc, 0, "kiln encode on the GPU must write the CPU backend's textures");
}
