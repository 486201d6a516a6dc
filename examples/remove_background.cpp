// Background removal with an ONNX segmentation model (ISNet, as scripts/remove-background.sh
// fetches it) through rlx::OnnxModel: reads a photo, runs the model once and writes the
// foreground mask (8-bit gray PNG) and the cut-out (RGBA PNG, the mask as alpha).
//
//   remove_background MODEL.onnx IMAGE [--out-mask PATH] [--out-cutout PATH] [--threads N]
//                     [--device cpu|cuda|vulkan|webgpu] [--save-input x.npy] [--save-output y.npy]
//
// The model takes one float input [1,3,H,W] (ISNet: 1024x1024) and gives the mask, values in
// [0,1], as its first output ([1,1,H,W]). Preprocessing as the model's JavaScript library does
// it: bilinear resize of the RGB image to HxW, then (pixel - 128) / 256 per channel, NCHW. The
// mask is resized back to the image's size (bilinear). Image I/O: stb_image (Debian's libstb-dev).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "rlx/onnx.h"
#include "rlx/rlx.h"

#define STB_IMAGE_IMPLEMENTATION
#define STB_IMAGE_STATIC
#include "stb_image.h"
#define STB_IMAGE_WRITE_IMPLEMENTATION
#define STB_IMAGE_WRITE_STATIC
#include "stb_image_write.h"

namespace {

namespace fs = std::filesystem;

struct Args {
  std::string model, image, out_mask, out_cutout, save_input, save_output;
  std::string device = "cpu";
  int threads = 0;
};

void usage(const char* prog) {
  std::printf(
      "usage: %s MODEL.onnx IMAGE [options]\n"
      "  --out-mask PATH     the mask, 8-bit gray PNG (default: IMAGE's folder, <name>-mask.png)\n"
      "  --out-cutout PATH   the image with the mask as alpha, RGBA PNG (default: <name>-cutout.png)\n"
      "  --threads N         CPU threads, 0 = all cores (default 0)\n"
      "  --device NAME       cpu, cuda, vulkan or webgpu (default cpu)\n"
      "  --save-input PATH   write the preprocessed model input as .npy\n"
      "  --save-output PATH  write the model's mask output (model resolution) as .npy\n",
      prog);
}

// Returns false (after a message) on a usage error.
bool parse_args(int argc, char** argv, Args& a, bool& help) {
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    if (s == "-h" || s == "--help") {
      help = true;
      return true;
    }
    if (s.rfind("--", 0) != 0) {
      positional.push_back(s);
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "error: %s needs a value\n", s.c_str());
      return false;
    }
    const std::string v = argv[++i];
    if (s == "--out-mask") a.out_mask = v;
    else if (s == "--out-cutout") a.out_cutout = v;
    else if (s == "--device") a.device = v;
    else if (s == "--save-input") a.save_input = v;
    else if (s == "--save-output") a.save_output = v;
    else if (s == "--threads") {
      char* end = nullptr;
      const long n = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || n < 0 || n > 4096) {
        std::fprintf(stderr, "error: --threads expects a non-negative integer, got '%s'\n", v.c_str());
        return false;
      }
      a.threads = static_cast<int>(n);
    } else {
      std::fprintf(stderr, "error: unknown option '%s'\n", s.c_str());
      return false;
    }
  }
  if (positional.size() != 2) {
    std::fprintf(stderr, "error: expected MODEL.onnx and IMAGE, got %zu arguments\n", positional.size());
    return false;
  }
  a.model = positional[0];
  a.image = positional[1];
  const fs::path img(a.image);
  if (a.out_mask.empty()) a.out_mask = (img.parent_path() / (img.stem().string() + "-mask.png")).string();
  if (a.out_cutout.empty()) a.out_cutout = (img.parent_path() / (img.stem().string() + "-cutout.png")).string();
  return true;
}

// Bilinear resize of an interleaved (HWC) float image, with the sampling of the model's
// JavaScript library: destination pixel x reads source coordinate x * src_w / dst_w.
std::vector<float> resize_bilinear(const std::vector<float>& src, int sw, int sh, int channels, int dw, int dh) {
  std::vector<float> dst(static_cast<size_t>(dw) * dh * channels);
  const double sx = static_cast<double>(sw) / dw, sy = static_cast<double>(sh) / dh;
  for (int y = 0; y < dh; ++y) {
    const double fy = y * sy;
    const int y0 = static_cast<int>(fy), y1 = std::min(y0 + 1, sh - 1);
    const double wy = fy - y0;
    for (int x = 0; x < dw; ++x) {
      const double fx = x * sx;
      const int x0 = static_cast<int>(fx), x1 = std::min(x0 + 1, sw - 1);
      const double wx = fx - x0;
      for (int c = 0; c < channels; ++c) {
        auto at = [&](int yy, int xx) { return src[(static_cast<size_t>(yy) * sw + xx) * channels + c]; };
        const double top = at(y0, x0) * (1 - wx) + at(y0, x1) * wx;
        const double bottom = at(y1, x0) * (1 - wx) + at(y1, x1) * wx;
        dst[(static_cast<size_t>(y) * dw + x) * channels + c] = static_cast<float>(top * (1 - wy) + bottom * wy);
      }
    }
  }
  return dst;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int run(const Args& args) {
  using clock = std::chrono::steady_clock;
  for (const auto& [what, file] : {std::pair{"model", args.model}, std::pair{"image", args.image}}) {
    std::error_code ec;
    if (!fs::exists(file, ec) || !fs::is_regular_file(file, ec)) {
      std::fprintf(stderr, "error: %s file '%s' %s\n", what, file.c_str(),
                   fs::exists(file, ec) ? "is not a regular file" : "not found");
      return 1;
    }
  }

  // 1. The photo, as 8-bit RGBA (stb converts gray, RGB and 16-bit images).
  int w = 0, h = 0, channels_in_file = 0;
  stbi_uc* pixels = stbi_load(args.image.c_str(), &w, &h, &channels_in_file, 4);
  if (!pixels) {
    std::fprintf(stderr, "error: cannot read image '%s': %s (stb_image reads PNG, JPEG, BMP, GIF, TGA, PSD, PNM)\n",
                 args.image.c_str(), stbi_failure_reason());
    return 1;
  }
  std::vector<uint8_t> rgba(pixels, pixels + static_cast<size_t>(w) * h * 4);
  stbi_image_free(pixels);
  std::printf("image: %s, %dx%d\n", args.image.c_str(), w, h);

  // 2. The model: one float input [1,3,H,W].
  rlx::OnnxModelOptions options;
  options.device = rlx::device_from_name(args.device);
  options.compile.num_threads = args.threads;
  auto t0 = clock::now();
  rlx::OnnxModel model(args.model, options);
  const double load_s = seconds_since(t0);
  if (model.inputs().size() != 1) {
    std::fprintf(stderr, "error: %s has %zu inputs; expected one image input [1,3,H,W]\n", args.model.c_str(),
                 model.inputs().size());
    return 1;
  }
  const rlx::OnnxModel::Input& in = model.inputs()[0];
  const rlx::Shape& s = in.shape;
  auto dim_or = [](const rlx::Dim& d, int64_t fallback) { return d.is_static() ? d.value : fallback; };
  if (!in.has_shape || s.rank() != 4 || dim_or(s[0], 1) != 1 || dim_or(s[1], 3) != 3 || !rlx::is_float(s.dtype) ||
      dim_or(s[2], 1024) < 1 || dim_or(s[3], 1024) < 1 || dim_or(s[2], 1024) > 8192 || dim_or(s[3], 1024) > 8192) {
    std::fprintf(stderr, "error: %s: input '%s' is %s; expected a float image [1,3,H,W]\n", args.model.c_str(),
                 in.name.c_str(), in.has_shape ? s.str().c_str() : "declared without a shape");
    return 1;
  }
  const int mh = static_cast<int>(dim_or(s[2], 1024)), mw = static_cast<int>(dim_or(s[3], 1024));

  // 3. Preprocessing: RGB resized to the model's size, (p - 128) / 256, HWC -> NCHW.
  std::vector<float> rgb(static_cast<size_t>(w) * h * 3);
  for (size_t i = 0; i < static_cast<size_t>(w) * h; ++i)
    for (int c = 0; c < 3; ++c) rgb[i * 3 + c] = rgba[i * 4 + c];
  const std::vector<float> resized = resize_bilinear(rgb, w, h, 3, mw, mh);
  const size_t plane = static_cast<size_t>(mw) * mh;
  std::vector<float> nchw(3 * plane);
  for (size_t i = 0; i < plane; ++i)
    for (size_t c = 0; c < 3; ++c) nchw[c * plane + i] = (resized[i * 3 + c] - 128.0f) / 256.0f;
  rlx::Tensor x = rlx::Tensor::f32({1, 3, mh, mw}, nchw);
  if (s.dtype != rlx::DType::F32) x = x.cast(s.dtype);
  if (!args.save_input.empty()) rlx::save_npy(x, args.save_input);
  const rlx::NamedTensors inputs = {{in.name, x}};

  // 4. Import + compile for this input shape (OnnxModel caches it), then one run.
  t0 = clock::now();
  model.compiled(inputs);
  const double compile_s = seconds_since(t0);
  t0 = clock::now();
  rlx::Tensor out = model.run(inputs, {0})[0];
  const double run_s = seconds_since(t0);
  std::printf("model: %s, input '%s' %s on %s: load %.2f s, import + compile %.2f s, run %.2f s\n",
              args.model.c_str(), in.name.c_str(), x.shape_info().str().c_str(), args.device.c_str(), load_s,
              compile_s, run_s);
  if (!args.save_output.empty()) rlx::save_npy(out, args.save_output);

  // 5. The mask: the first output, [.., H', W'] with one channel.
  const int64_t oh = out.rank() >= 2 ? out.dim(out.rank() - 2) : 0, ow = out.rank() >= 2 ? out.dim(out.rank() - 1) : 0;
  if (oh < 1 || ow < 1 || out.numel() != oh * ow) {
    std::fprintf(stderr, "error: the model's first output '%s' is %s; expected a one-channel mask [1,1,H,W]\n",
                 model.output_names()[0].c_str(), out.shape_info().str().c_str());
    return 1;
  }
  const std::vector<float> raw = out.to_f32();
  double lo = raw[0], hi = raw[0], sum = 0;
  size_t foreground = 0;
  for (float v : raw) {
    lo = std::min<double>(lo, v);
    hi = std::max<double>(hi, v);
    sum += v;
    foreground += v >= 0.5f;
  }
  std::printf("mask %s: min %.4f, max %.4f, mean %.4f, foreground (>= 0.5) %.1f%%\n", out.shape_info().str().c_str(),
              lo, hi, sum / static_cast<double>(raw.size()), 100.0 * static_cast<double>(foreground) / raw.size());

  // 6. Back to the image's size; 8-bit mask and RGBA cut-out.
  const std::vector<float> mask = resize_bilinear(raw, static_cast<int>(ow), static_cast<int>(oh), 1, w, h);
  std::vector<uint8_t> mask8(mask.size());
  for (size_t i = 0; i < mask.size(); ++i) {
    mask8[i] = static_cast<uint8_t>(std::lround(std::clamp(mask[i], 0.0f, 1.0f) * 255.0f));
    rgba[i * 4 + 3] = mask8[i];
  }
  if (!stbi_write_png(args.out_mask.c_str(), w, h, 1, mask8.data(), w)) {
    std::fprintf(stderr, "error: cannot write '%s'\n", args.out_mask.c_str());
    return 1;
  }
  if (!stbi_write_png(args.out_cutout.c_str(), w, h, 4, rgba.data(), w * 4)) {
    std::fprintf(stderr, "error: cannot write '%s'\n", args.out_cutout.c_str());
    return 1;
  }
  std::printf("wrote %s (mask) and %s (cut-out)\n", args.out_mask.c_str(), args.out_cutout.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  bool help = false;
  if (!parse_args(argc, argv, args, help)) {
    usage(argv[0]);
    return 2;
  }
  if (help) {
    usage(argv[0]);
    return 0;
  }
  try {
    return run(args);
  } catch (const std::exception& e) {  // rlx::Error (model, device, run) and std:: failures
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
