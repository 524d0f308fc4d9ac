// `leantrain generate`: samples from a language-model checkpoint written by `leantrain train
// --save`, through its tokenizer. The prompt is printed first, then each piece of decoded text as
// soon as it exists.
#include "cli/cli.h"

namespace lt::cli {

void add_generate_flags(CLI::App& cmd, GenerateConfig& c) {
  cmd.footer("Example: leantrain generate --checkpoint runs/gpt --prompt \"The \" --max-new-tokens 200 --top-k 40\n"
             "         leantrain generate --checkpoint runs/chat --chat --prompt \"What is a cat?\"");
  cmd.add_option("--checkpoint", c.checkpoint, "Checkpoint directory written by 'leantrain train --save'")->required();
  cmd.add_option("--prompt", c.prompt, "Text to continue (with --chat: the user's message)")->capture_default_str();
  cmd.add_flag("--chat", c.chat,
               "Render a conversation with the checkpoint's chat template and its generation prompt; sample the "
               "assistant's reply until the template's end-of-turn token");
  cmd.add_option("--messages", c.messages,
                 "With --chat (implied): a JSON file holding the conversation, {\"messages\": [...]} (and \"tools\") as "
                 "a data line, or the list of messages alone")
      ->each([](const std::string& v) {
        if (v.empty())
          throw UsageError("--messages ''", "the path is empty", "pass a JSON file with the conversation, or leave --messages out");
      });
  add_int_flag(cmd, flag_range::max_new_tokens, c.max_new_tokens, "Tokens to sample at most (sampling also stops at the tokenizer's EOS)")->capture_default_str();
  add_real_flag(cmd, "--temperature", c.temperature, "Softmax temperature (0: greedy)")->capture_default_str();
  add_int_flag(cmd, flag_range::top_k, c.top_k, "Sample among the k most likely tokens (0: all)")->capture_default_str();
  add_seed_flag(cmd, c.seed, "Sampling seed")->capture_default_str();
  cmd.add_option("--device", c.device, "cpu, cuda, cuda:N or auto")->capture_default_str();
}

int run_generate(const GenerateConfig& cfg) {
  if (cfg.chat || !cfg.messages.empty()) {  // the reply alone: the rendered prompt is the template's markup
    generate_text(cfg, [&](const std::string& piece) {
      std::fputs(piece.c_str(), stdout);
      std::fflush(stdout);
    });
    std::fputc('\n', stdout);
    std::fflush(stdout);
    return 0;
  }
  bool started = false;
  generate_text(cfg, [&](const std::string& piece) {
    if (!started) {
      std::fputs(cfg.prompt.c_str(), stdout);
      started = true;
    }
    std::fputs(piece.c_str(), stdout);
    std::fflush(stdout);
  });
  if (!started) std::fputs(cfg.prompt.c_str(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
  return 0;
}

}  // namespace lt::cli
