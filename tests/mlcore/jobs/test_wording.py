from mlcore.jobs.registry import get_kind
from mlcore.jobs.wording import count


def test_a_count_of_one_takes_the_singular_and_any_other_the_plural() -> None:
    assert [count(n, "image") for n in (0, 1, 2)] == ["0 images", "1 image", "2 images"]
    assert count(3, "class", "classes") == "3 classes" and count(1, "class", "classes") == "1 class"


def test_the_embed_summary_of_one_image_reads_in_the_singular() -> None:
    scalars = {"images": 1.0, "detected": 1.0, "bit_accuracy": 0.98, "psnr": 38.0, "min_psnr": 38.0, "ssim": 0.99}
    text = get_kind("watermark-embed").spec.summarize({**scalars, "embed_trained": 1.0})
    assert text.startswith("Marked 1 image:") and "detected the mark in it." in text
    unread = get_kind("watermark-embed").spec.summarize({**scalars, "detected": 0.0, "bit_accuracy": 0.5})
    assert unread.startswith("The mark in this image is NOT readable") and "treat the file as unmarked" in unread
